// OAuth logins (docs/spec.md §8): a person logs in with `keybroker auth add` (device code or PKCE); the
// logins in the token store are the pool, refreshed by the broker.
import { derivedTokenEnvName } from "../provider-defaults.js";
import type { ProviderKind } from "./kind.js";

export const oauthLogin: ProviderKind = {
  name: "oauth_login",
  poolOfLogins: true,
  personLogins: true,
  boundLogins: false,
  signed: false,
  keyFromPlaceholder: false,
  wholeHost: false,
  derivedEnv: derivedTokenEnvName,
  signingRefs: () => [],
  loadRefs: (rule) => rule.credentials,
  active: () => true,
  statusNote: (rule) => `authenticates with OAuth logins (keybroker auth add ${rule.id})`,
};
