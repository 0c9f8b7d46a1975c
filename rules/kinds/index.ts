// The provider kinds (decision 132): one file each, chosen once when the rules compile.

import type { OAuthRule, ProviderRule } from "../types.js";
import { awsSigV4 } from "./aws-sigv4.js";
import { clientCredentials } from "./client-credentials.js";
import { googleServiceAccount } from "./google-service-account.js";
import { keyPool } from "./key-pool.js";
import {
  chooseKind,
  type KindKeys,
  type ProviderKind,
  type ProviderKindName,
  unhandledKind,
} from "./kind.js";
import { mcp } from "./mcp.js";
import { oauthLogin } from "./oauth-login.js";

export { chooseKind, type KindKeys, type ProviderKind, type ProviderKindName, unhandledKind };

const KINDS: Readonly<Record<ProviderKindName, ProviderKind>> = {
  key_pool: keyPool,
  oauth_login: oauthLogin,
  client_credentials: clientCredentials,
  mcp,
  google_service_account: googleServiceAccount,
  aws_sigv4: awsSigV4,
};

/** The kind a compiled rule was given when it compiled. */
export function kindOf(rule: { readonly kind: ProviderKindName }): ProviderKind {
  return KINDS[rule.kind];
}

/**
 * Whether the rule's kind logs in with OAuth (its pool is logins): narrows it to the kinds
 * whose compiled rule carries `oauth`.
 */
export function isOAuthRule(rule: ProviderRule): rule is OAuthRule {
  return kindOf(rule).poolOfLogins;
}

/** The kind of an entry as written (a catalogue entry, before it compiles). */
export function kindOfEntry(entry: KindKeys): ProviderKind {
  return KINDS[chooseKind(entry)];
}
