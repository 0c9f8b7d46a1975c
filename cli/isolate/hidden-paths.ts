// What `run --isolate` hides from the agent (SPEC §20, decision 115): the broker's home, the rule
// file, and every file a secret source reads (the `.env` files, each `file:` reference, the
// files behind Infisical's machine identity or an OAuth client secret). Everything else stays
// as the user sees it. A `cmd:` reference runs a program whose own files keybroker cannot know.
import { existsSync } from "node:fs";
import { dirname, isAbsolute } from "node:path";
import { absolutePath, parseRef } from "../../rules/credential-ref.js";
import { kindOf } from "../../rules/kinds/index.js";
import type { Rules } from "../../rules/types.js";
import { dotenvCandidates } from "../../secrets/sources.js";

export interface HiddenPaths {
  /** Folders covered by an empty tmpfs. */
  readonly folders: readonly string[];
  /** Files covered by an empty, read-only file. */
  readonly files: readonly string[];
}

/** Every credential reference a rule set may resolve. */
function references(rules: Rules): string[] {
  const refs: (string | undefined)[] = [];
  for (const p of rules.providers) {
    refs.push(...p.credentials, p.oauth?.clientSecret, ...kindOf(p).signingRefs(p));
  }
  for (const c of rules.clients) refs.push(c.token);
  refs.push(rules.sources.infisical?.clientId, rules.sources.infisical?.clientSecret);
  return refs.filter((r): r is string => r !== undefined);
}

/**
 * The paths to hide for these rules, with `home` the broker's home and `ruleFiles` the rule
 * files in play (the one read here and the running broker's). Only paths that exist are kept:
 * nothing can be mounted over a missing one, and there is nothing to read there either.
 */
export function hiddenPaths(
  rules: Rules,
  home: string,
  cwd: string,
  ruleFiles: readonly (string | undefined)[],
): HiddenPaths {
  const base = isAbsolute(rules.origin) ? dirname(rules.origin) : cwd;
  const files = new Set<string>();
  for (const f of ruleFiles) if (f !== undefined && isAbsolute(f)) files.add(f);
  for (const f of dotenvCandidates(rules, { home, cwd, env: {}, warn: () => {} })) files.add(f);
  for (const ref of references(rules)) {
    const parsed = parseRef(ref);
    if (parsed.source === "file") files.add(absolutePath(parsed.key, base));
  }
  const folders = [home];
  const inHome = (f: string) => f === home || f.startsWith(`${home}/`);
  return {
    folders: folders.filter((d) => existsSync(d)),
    files: [...files].filter((f) => !inHome(f) && existsSync(f)).sort(),
  };
}
