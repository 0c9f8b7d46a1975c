// OAuth client credentials (docs/spec.md §8): no person logs in; the broker fetches the token from the
// client's id and secret and keeps it as the provider's one login.
import { derivedTokenEnvName } from "../provider-defaults.js";
import type { ProviderKind } from "./kind.js";

export const clientCredentials: ProviderKind = {
  name: "client_credentials",
  poolOfLogins: true,
  personLogins: false,
  boundLogins: false,
  signed: false,
  keyFromPlaceholder: false,
  wholeHost: false,
  derivedEnv: derivedTokenEnvName,
  signingRefs: () => [],
  loadRefs: (rule) => rule.credentials,
  active: () => true,
  statusNote: () => "authenticates with OAuth client credentials: the broker fetches its token, no login",
};
