// A Google service account (SPEC §9): the broker mints an access token from the key and sends
// it as a bearer, after every other change to the request.
import { derivedEnvName } from "../provider-defaults.js";
import type { GoogleServiceAccountAuth, ProviderRule } from "../types.js";
import type { ProviderKind } from "./kind.js";

const parts = (rule: ProviderRule): readonly string[] => [(rule.auth as GoogleServiceAccountAuth).key];

export const googleServiceAccount: ProviderKind = {
  name: "google_service_account",
  poolOfLogins: false,
  personLogins: false,
  boundLogins: false,
  signed: true,
  keyFromPlaceholder: false,
  wholeHost: false,
  derivedEnv: derivedEnvName,
  signingRefs: parts,
  loadRefs: parts,
  active: (resolved, total) => resolved === total,
  statusNote: () => undefined,
};
