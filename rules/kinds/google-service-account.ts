// A Google service account (docs/spec.md §9): the broker mints an access token from the key and sends
// it as a bearer, after every other change to the request.
import type { ProviderRule } from "../types.js";
import type { ProviderKind } from "./kind.js";
import { signerKind } from "./signer.js";

const parts = (rule: ProviderRule): readonly string[] =>
  rule.kind === "google_service_account" ? [rule.auth.key] : [];

export const googleServiceAccount: ProviderKind = signerKind("google_service_account", parts);
