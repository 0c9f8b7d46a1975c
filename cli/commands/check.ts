import { homeKey } from "../../core/home.js";
import { type ProviderState, Runtime } from "../../proxy/runtime.js";
import { derivedEnvName, isOAuthOnly } from "../../rules/provider-defaults.js";
import type { ProviderRule, Rules } from "../../rules/types.js";
import { DotenvSource } from "../../secrets/dotenv-source.js";
import { describeLogin } from "../../secrets/oauth/login.js";
import { readLogins } from "../../secrets/oauth/token-store.js";
import {
  type Attempt,
  describeAttempt,
  parseRef,
  type Resolution,
  type SecretResolver,
} from "../../secrets/resolver.js";
import { createSecretResolver, dotenvCandidates, type SourceContext } from "../../secrets/sources.js";
import { COMMON_HELP, parse } from "../args.js";
import type { Command } from "../command.js";
import { createContext } from "../context.js";
import { readRules } from "../read-rules.js";

export const check: Command = {
  name: "check",
  help: `Usage: keybroker check [--config FILE] [--home DIR]

Validates the rule file (every problem at once, each with its path and a fix), then resolves
every provider's credentials and reports, for each one, which source answered and why the
sources before it did not (missing, empty, error). Values are never printed, only a
fingerprint. A bare NAME is looked up through sources.order (Infisical when configured, then
.env, then the environment, always last). Exits 1 when the rule file is invalid, when a
provider the rule file names has no credential, or when no provider has one at all.

Environment: the variables that hold your credentials, and INFISICAL_CLIENT_ID /
INFISICAL_CLIENT_SECRET when sources.infisical uses them.

${COMMON_HELP}`,
  async run(argv) {
    const { values } = parse(argv, {});
    const ctx = createContext(values);
    const { rules } = readRules(ctx, values.config);
    ctx.out(`rules: ${rules.origin} (valid)`);
    const warnings: string[] = [];
    const sourceCtx: SourceContext = {
      env: ctx.env,
      home: ctx.home,
      cwd: ctx.cwd,
      warn: (m) => warnings.push(m),
    };
    const resolver = createSecretResolver(rules, sourceCtx);
    ctx.out(`lookup chain for bare names: ${describeChain(rules, resolver, sourceCtx)}`);
    const rt = await Runtime.build(rules, resolver, homeKey(ctx.home));
    const problems: string[] = [];
    let active = 0;
    for (const p of rt.providers.values()) {
      if (!p.active && p.rule.fromCatalogue) continue;
      const report = await reportProvider(p, rules, resolver, ctx.out, ctx.home);
      if (report.usable) active++;
      problems.push(...report.problems);
    }
    const inactive = [...rt.providers.values()]
      .filter((p) => !p.active && p.rule.fromCatalogue)
      .map((p) => p.rule.id);
    if (inactive.length > 0) ctx.out(`catalogue providers without a key (inactive): ${inactive.join(", ")}`);
    if (active === 0 && problems.length === 0) {
      problems.push(
        "no provider has a credential: export OPENAI_API_KEY (or another provider's key) or add a rule file",
      );
    }
    for (const w of warnings) ctx.err(`warning: ${w}`);
    for (const p of problems) ctx.err(`problem: ${p}`);
    return problems.length > 0 ? 1 : 0;
  },
};

/** `infisical (https://…, project p, environment prod, folder /agents) → dotenv (./.env) → env` */
function describeChain(rules: Rules, resolver: SecretResolver, ctx: SourceContext): string {
  return resolver.order
    .map((name) => {
      if (name === "infisical" && rules.sources.infisical !== undefined) {
        const i = rules.sources.infisical;
        return `infisical (${i.siteUrl}, project ${i.projectId}, environment ${i.environment}, folder ${i.path})`;
      }
      if (name === "dotenv") {
        const candidates = dotenvCandidates(rules, ctx);
        const found = new DotenvSource(candidates).paths();
        return `dotenv (${found.length > 0 ? found.join(", ") : `none of ${candidates.join(", ")} exists`})`;
      }
      return name;
    })
    .join(" → ");
}

interface Report {
  /** The provider can serve requests. */
  readonly usable: boolean;
  readonly problems: readonly string[];
}

/** Prints a provider's state and each credential's resolution. */
async function reportProvider(
  p: ProviderState,
  rules: Rules,
  resolver: SecretResolver,
  out: (line: string) => void,
  home: string,
): Promise<Report> {
  const rule = p.rule;
  const id = rule.id;
  if (rule.oauth !== undefined) {
    const logins = (await readLogins(home)).filter((l) => l.provider === id);
    const never = isOAuthOnly(id) ? `; it never reads ${derivedEnvName(id)} or any other API key` : "";
    if (logins.length === 0) {
      out(
        `${id}: inactive — it authenticates only with OAuth logins and has none yet (keybroker auth add ${id})${never}`,
      );
      return { usable: false, problems: [] };
    }
    out(`${id}: ${logins.length} OAuth login${logins.length === 1 ? "" : "s"}${never}`);
    for (const l of logins.map(describeLogin)) {
      out(`  ${l.id}: ${l.state}${l.expiresAt === undefined ? "" : `, access token until ${l.expiresAt}`}`);
    }
    return { usable: logins.some((l) => l.state === "ok"), problems: [] };
  }
  if (rule.auth !== undefined) return reportServiceAccount(rule, rules, resolver, out);
  out(`${id}: ${p.active ? "active" : "NO CREDENTIAL"}`);
  if (rule.credentials.length === 0) out("  (no credentials listed)");
  for (const r of p.resolutions) out(`  ${describeResolution(r)}`);
  if (p.active) return { usable: true, problems: [] };
  const first = rule.credentials[0];
  return {
    usable: false,
    problems: [
      first === undefined
        ? `provider "${id}" has no credential: list one under providers.${id}.credentials`
        : `provider "${id}" has no credential: ${whereToSet(first, rules)}`,
    ],
  };
}

/** Service-account providers: their key references, resolved like credentials. */
async function reportServiceAccount(
  rule: ProviderRule,
  rules: Rules,
  resolver: SecretResolver,
  out: (line: string) => void,
): Promise<Report> {
  const auth = rule.auth!;
  const refs =
    auth.kind === "google_service_account"
      ? [auth.key]
      : [
          auth.accessKeyId,
          auth.secretAccessKey,
          ...(auth.sessionToken === undefined ? [] : [auth.sessionToken]),
        ];
  const resolutions = await Promise.all(refs.map((ref) => resolver.resolve(ref)));
  const missing = resolutions.filter((r) => r.secret === undefined);
  out(`${rule.id}: ${missing.length === 0 ? "service account" : "NO CREDENTIAL"} (${auth.kind})`);
  for (const r of resolutions) out(`  ${describeResolution(r)}`);
  return {
    usable: missing.length === 0,
    problems: missing.map(
      (r) => `provider "${rule.id}" (${auth.kind}) is missing ${r.ref}: ${whereToSet(r.ref, rules)}`,
    ),
  };
}

/** `NAME: from env (sha256:…); before it infisical: missing, dotenv: missing` or `NAME: not found (…)`. */
function describeResolution(r: Resolution): string {
  const secret = r.secret;
  if (secret === undefined) return `${r.ref}: not found (${r.attempts.map(describeAttempt).join(", ")})`;
  const answered = r.attempts.at(-1);
  const stale = answered?.stale === true ? `, stale: ${answered.message ?? "its source is failing"}` : "";
  const before = r.attempts.slice(0, -1).map((a: Attempt) => describeAttempt(a));
  return `${r.ref}: from ${secret.source} (${secret.fingerprint}${stale})${before.length > 0 ? `; before it ${before.join(", ")}` : ""}`;
}

/** What to do so that `ref` has a value. */
function whereToSet(ref: string, rules: Rules): string {
  const parsed = parseRef(ref);
  switch (parsed.source) {
    case undefined: {
      const places = rules.sources.order.map((name) =>
        name === "infisical"
          ? `Infisical (folder ${rules.sources.infisical?.path ?? "/"})`
          : name === "dotenv"
            ? ".env"
            : "the environment",
      );
      if (!places.includes("the environment")) places.push("the environment");
      return `set ${ref} in ${oneOf(places)}, then run keybroker check again`;
    }
    case "env":
      return `export ${parsed.key} in the broker's environment`;
    case "dotenv":
      return `add ${parsed.key}=... to the .env file`;
    case "file":
      return `write the secret to ${parsed.key} (chmod 600)`;
    case "infisical":
      return `create the secret ${parsed.key} in Infisical (project and environment of sources.infisical)`;
    case "cmd":
      return `make the command print the secret (run it yourself to see why it did not)`;
    default:
      return `give ${ref} a value`;
  }
}

/** `a`, `a or b`, `a, b or c` */
function oneOf(items: readonly string[]): string {
  return items.length <= 1 ? (items[0] ?? "") : `${items.slice(0, -1).join(", ")} or ${items.at(-1)}`;
}
