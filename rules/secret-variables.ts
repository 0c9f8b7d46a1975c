// The credential references a rule set resolves secrets from, and the environment variables among
// them: `run` removes those from its command's environment, a running broker reports them for
// its own rules and blanks them in its initial environment, `check --exposure` looks for them.

import { parseRef } from "./credential-ref.js";
import { isOAuthRule, kindOf } from "./kinds/index.js";
import type { Rules } from "./types.js";

/**
 * Every credential reference of these rules: providers' credentials, service-account parts,
 * every placeholder variable (read as a bare name), OAuth client secrets,
 * client tokens, the Infisical machine identity, the fleet's Redis password.
 */
export function secretRefs(rules: Rules): string[] {
  const refs: string[] = [];
  const add = (ref: string | undefined) => {
    if (ref !== undefined) refs.push(ref);
  };
  for (const provider of rules.providers) {
    provider.credentials.forEach(add);
    provider.credentialAliases.forEach(add);
    // Where agents read the provider's key: a value there is a real one, whoever may use the
    // provider (decision 122).
    for (const name of provider.placeholder.env) add(name);
    kindOf(provider).signingRefs(provider).forEach(add);
    if (isOAuthRule(provider)) add(provider.oauth.clientSecret);
  }
  for (const client of rules.clients) add(client.token);
  add(rules.sources.infisical?.clientId);
  add(rules.sources.infisical?.clientSecret);
  add(rules.state?.password);
  return refs;
}

/**
 * Every environment variable that holds (or may hold) a real secret under these rules: the
 * references named bare or with `env:`. `run` removes them from the child's environment.
 */
export function secretVariableNames(rules: Rules): Set<string> {
  const names = new Set<string>();
  for (const ref of secretRefs(rules)) {
    const parsed = parseRef(ref);
    if (parsed.source === undefined || parsed.source === "env") names.add(parsed.key);
  }
  return names;
}
