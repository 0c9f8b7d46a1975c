// The files a rule set's secret sources read, as absolute paths: the `.env` files (the
// configured one, else `./.env` from `cwd` and the home's), every `file:` reference
// (credentials, client tokens, Infisical's machine identity, OAuth client secrets) and the rule
// file itself. `run --isolate` hides them (decision 115); a running broker names its own, from
// its own folder, for a `run` started elsewhere (decision 136). A `cmd:` reference runs a program
// whose own files cannot be known here.
import { dirname, isAbsolute, resolve } from "node:path";
import { absolutePath, parseRef } from "../rules/credential-ref.js";
import { isOAuthRule, kindOf } from "../rules/kinds/index.js";
import type { Rules } from "../rules/types.js";
import { dotenvCandidates } from "./sources.js";

/** Every credential reference a rule set may resolve. */
function references(rules: Rules): string[] {
  const refs: (string | undefined)[] = [];
  for (const p of rules.providers) {
    refs.push(
      ...p.credentials,
      isOAuthRule(p) ? p.oauth.clientSecret : undefined,
      ...kindOf(p).signingRefs(p),
    );
  }
  for (const c of rules.clients) refs.push(c.token);
  refs.push(rules.sources.infisical?.clientId, rules.sources.infisical?.clientSecret);
  return refs.filter((r): r is string => r !== undefined);
}

/** The files these rules read secrets from, with `home` the broker's home and `cwd` its folder. */
export function secretFiles(rules: Rules, home: string, cwd: string): string[] {
  const base = isAbsolute(rules.origin) ? dirname(rules.origin) : cwd;
  const files = new Set<string>();
  if (isAbsolute(rules.origin)) files.add(rules.origin);
  for (const f of dotenvCandidates(rules, { home, cwd, env: {}, warn: () => {} })) files.add(resolve(cwd, f));
  for (const ref of references(rules)) {
    const parsed = parseRef(ref);
    if (parsed.source === "file") files.add(absolutePath(parsed.key, base));
  }
  return [...files];
}
