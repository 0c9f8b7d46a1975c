import { pipeline } from "node:stream/promises";
import { createRedactStream } from "../../audit/redact.js";
import { kindOf } from "../../rules/kinds/index.js";
import type { Rules } from "../../rules/types.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { createContext, localResolver } from "../context.js";
import { readRules } from "../read-rules.js";

/** Every credential reference a rule set names: pools, signing keys, client tokens, source logins. */
export function secretRefs(rules: Rules): string[] {
  const refs = new Set<string>();
  for (const p of rules.providers) {
    for (const ref of p.credentials) refs.add(ref);
    for (const ref of kindOf(p).signingRefs(p)) refs.add(ref);
  }
  for (const c of rules.clients) if (c.token !== undefined) refs.add(c.token);
  if (rules.sources.infisical !== undefined) refs.add(rules.sources.infisical.clientSecret);
  return [...refs];
}

export const redact: Command = {
  name: "redact",
  help: `Usage: keybroker redact [--config FILE] [--home DIR] < transcript > redacted

Copies standard input to standard output line by line, masking:
  - every secret value the rule file's credentials resolve to (with the environment, .env and
    files this command runs with), in raw, JSON-escaped, URL-encoded and base64 form;
  - secret-shaped strings: sk-/sk-ant- keys, GitHub (ghp_, gho_, ghu_, ghs_, ghr_,
    github_pat_), GitLab (glpat- …), Slack (xox?-, xapp-), Google (AIza…, ya29.), AWS access
    key ids and secret keys by context, Stripe (sk_live_, rk_live_), SendGrid
    SG.<id>.<secret> (both segments), Hugging Face hf_, Replicate r8_, npm_, pypi-, JWTs,
    PEM private key blocks, Authorization / Proxy-Authorization / x-api-key / api-key /
    x-goog-api-key header values, KEY= TOKEN= SECRET= PASSWORD= assignments (env, YAML, JSON),
    URL and connection-string passwords.
A vendor's fixed prefix stays visible (sk-ant-[REDACTED], SG.[REDACTED]); names, header names
and URL user names stay too (DB_PASSWORD=[REDACTED]). keybroker placeholders (…kbph-…), git
SHAs, UUIDs and ordinary words are left alone. Nothing is ever written but standard output.

${COMMON_HELP}`,
  async run(argv) {
    const { values, positionals } = parse(argv, {}, true);
    if (positionals.length > 0) {
      throw new UsageError(`redact reads standard input; unexpected argument "${positionals[0]}"`);
    }
    const ctx = createContext(values);
    const { rules } = readRules(ctx, values.config);
    const warnings: string[] = [];
    const resolver = localResolver(ctx, rules, (m) => warnings.push(m));
    const resolutions = await Promise.all(secretRefs(rules).map((ref) => resolver.resolve(ref)));
    const known = resolutions.flatMap((r) => (r.secret === undefined ? [] : [r.secret.reveal()]));
    for (const w of warnings) ctx.err(`warning: ${w}`);
    try {
      await pipeline(process.stdin, createRedactStream(known), process.stdout);
    } catch (err) {
      // The reader went away (`| head`): not an error of ours.
      if ((err as NodeJS.ErrnoException).code !== "EPIPE") throw err;
    }
    return 0;
  },
};
