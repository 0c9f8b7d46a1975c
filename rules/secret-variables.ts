// The environment variables a rule set reads real secrets from: `run` removes them from its
// command's environment, and a running broker reports them for its own rules.
import { parseRef } from "../secrets/resolver.js";
import type { Rules } from "./types.js";

/**
 * Every environment variable that holds (or may hold) a real secret under these rules:
 * credentials named bare or with `env:`, every placeholder variable, client tokens, and the
 * Infisical machine identity.
 * `run` removes them from the child's environment.
 */
export function secretVariableNames(rules: Rules): Set<string> {
  const names = new Set<string>();
  const add = (ref: string | undefined) => {
    if (ref === undefined) return;
    const parsed = parseRef(ref);
    if (parsed.source === undefined || parsed.source === "env") names.add(parsed.key);
  };
  for (const provider of rules.providers) {
    provider.credentials.forEach(add);
    provider.credentialAliases.forEach(add);
    // Where agents read the provider's key: a value there is a real one, whoever may use the
    // provider (decision 122).
    for (const name of provider.placeholder.env) names.add(name);
    if (provider.auth?.kind === "aws_sigv4") {
      add(provider.auth.accessKeyId);
      add(provider.auth.secretAccessKey);
      add(provider.auth.sessionToken);
    }
    if (provider.auth?.kind === "google_service_account") add(provider.auth.key);
  }
  for (const client of rules.clients) add(client.token);
  add(rules.sources.infisical?.clientId);
  add(rules.sources.infisical?.clientSecret);
  return names;
}
