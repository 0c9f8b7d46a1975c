// A broker (`start`, or `run` serving its command) keeps no secret in its initial environment:
// once the secrets are read, the variables that held them are blanked in `/proc/<pid>/environ`
// (core/initial-environ.ts, docs/decisions.md 119), so another process of the user listing
// environments finds nothing.
import { blankInitialValues } from "../core/initial-environ.js";
import { CATALOGUE } from "../rules/catalogue.js";
import { parseRef } from "../rules/credential-ref.js";
import { kindOfEntry } from "../rules/kinds/index.js";
import { derivedEnvName } from "../rules/provider-defaults.js";
import { secretVariableNames } from "../rules/secret-variables.js";
import type { Rules } from "../rules/types.js";
import { stripSecrets } from "./strip-secrets.js";

/** The variables the embedded catalogue reads keys from, used or not by these rules. */
function catalogueVariables(): string[] {
  const out: string[] = [];
  for (const [id, entry] of Object.entries(CATALOGUE)) {
    if (!kindOfEntry(entry).keyFromPlaceholder) continue;
    const env = entry.placeholder?.env ?? derivedEnvName(id);
    // Every alias the catalogue sets may hold a real key too (decision 122).
    const refs = [...(entry.credentials ?? []), ...(Array.isArray(env) ? env : [env])];
    for (const ref of refs) {
      const parsed = parseRef(ref);
      if (parsed.source === undefined || parsed.source === "env") out.push(parsed.key);
    }
  }
  return out;
}

/**
 * Every variable of this process's environment that holds a secret: those the rules (and the
 * catalogue) read secrets from, and any other whose value contains one of `secrets` or of their
 * values (`MY_COPY=$OPENAI_API_KEY`).
 */
export function secretHoldingVariables(rules: Rules, secrets: Iterable<string>): Set<string> {
  const names = new Set([...secretVariableNames(rules), ...catalogueVariables()]);
  const copies = stripSecrets({ ...process.env }, names, secrets);
  return new Set([...names, ...copies]);
}

/**
 * Blanks the secret-holding variables in this process's initial environment. Returns a warning
 * to show when some remain readable there (not Linux, or `/proc/self/mem` not writable).
 */
export function hideSecretsFromEnviron(rules: Rules, secrets: Iterable<string>): string | undefined {
  const names = secretHoldingVariables(rules, secrets);
  const present = [...names].filter((n) => (process.env[n] ?? "") !== "").sort();
  const result = blankInitialValues(names);
  if (!("unsupported" in result) || present.length === 0) return undefined;
  return `other processes of this user can still read ${present.join(", ")} in this process's environment (${result.unsupported}): keep the keys in a .env file in the home instead (keybroker check --exposure)`;
}
