// A Google service account (SPEC §9): the broker mints an access token from the key and sends
// it as a bearer, after every other change to the request.
import type { GoogleServiceAccountAuth, ProviderRule } from "../types.js";
import type { ProviderKind } from "./kind.js";
import { signerKind } from "./signer.js";

const parts = (rule: ProviderRule): readonly string[] => [(rule.auth as GoogleServiceAccountAuth).key];

export const googleServiceAccount: ProviderKind = signerKind("google_service_account", parts);
