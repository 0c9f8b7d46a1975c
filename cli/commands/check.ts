import { UserError } from "../../core/errors.js";
import { homeKey } from "../../core/home.js";
import { knownSecrets } from "../../core/scrub.js";
import { type ProviderState, Runtime } from "../../proxy/runtime.js";
import { CATALOGUE } from "../../rules/catalogue.js";
import { parseRef } from "../../rules/credential-ref.js";
import { formatProblem, RuleFileError } from "../../rules/errors.js";
import { kindOf, unhandledKind } from "../../rules/kinds/index.js";
import { derivedEnvName, isOAuthOnly } from "../../rules/provider-defaults.js";
import type { ClientCredentialsRule, ProviderRule, Rules } from "../../rules/types.js";
import { DotenvSource } from "../../secrets/dotenv-source.js";
import {
  type Attempt,
  describeAttempt,
  type Resolution,
  type SecretResolver,
} from "../../secrets/resolver.js";
import { createSecretResolver, dotenvCandidates, type SourceContext } from "../../secrets/sources.js";
import { readLogins } from "../../state/tokens/home.js";
import { describeLogin, type LoginSummary } from "../../state/tokens/login.js";
import { COMMON_HELP, parse } from "../args.js";
import { brokerCredentials, type CheckSource, checkSource } from "../check-source.js";
import type { Command } from "../command.js";
import { createContext } from "../context.js";
import { exposureLines, findExposure } from "../exposure.js";
import { readRules } from "../read-rules.js";

export const check: Command = {
  name: "check",
  help: `Usage: keybroker check [--json] [--exposure] [--config FILE] [--home DIR]

Validates the rule file (every problem at once, each with its path and a fix), then resolves
every provider's credentials and reports, for each one, which source answered and why the
sources before it did not (missing, empty, error). Values are never printed, only a
fingerprint. A bare NAME is looked up through sources.order (Infisical when configured, then
.env, then the environment, always last). Exits 1 when the rule file is invalid, when a
provider the rule file names has no credential, or when no provider has one at all.

  --json           one JSON object on stdout: rules, valid, lookupChain, providers (each with
                   its state and credentials: ref, source, fingerprint, attempts; an OAuth
                   provider its logins: id, state, expiry), inactive, warnings, problems; the
                   same exit codes
  --exposure       instead, list what another process of your user (an agent not run with
                   keybroker run --isolate) can read now, each with its fix, never a value: the
                   .env files and file: secrets the rules read, the home's secret files, and
                   running brokers (or the processes that started them) whose environment holds
                   a key. Exits 1 when a key is in a process environment or in a file outside
                   the home; the home's own files are listed but do not fail it. With --json:
                   { items: [{ what, holds, fix, exposed }], notes }

Environment: the variables that hold your credentials, and INFISICAL_CLIENT_ID /
INFISICAL_CLIENT_SECRET when sources.infisical uses them.

${COMMON_HELP}`,
  async run(argv) {
    const { values } = parse(argv, { json: { type: "boolean" }, exposure: { type: "boolean" } });
    const ctx = createContext(values);
    const json = values.json === true;
    if (values.exposure === true) {
      const report = findExposure(ctx, readRules(ctx, values.config).rules);
      if (json) ctx.out(JSON.stringify(report, null, 2));
      else for (const line of exposureLines(report)) ctx.out(line);
      return report.items.some((i) => i.exposed) ? 1 : 0;
    }
    let rules: Rules;
    let source: CheckSource | undefined;
    try {
      source = await checkSource(ctx, values.config);
      rules = readRules(ctx, source.path).rules;
    } catch (err) {
      if (!json || !(err instanceof UserError)) throw err;
      const cause = err.cause instanceof RuleFileError ? err.cause : undefined;
      const report: CheckReport = {
        ...emptyReport(cause?.origin),
        valid: false,
        problems: cause === undefined ? [err.message] : cause.problems.map(formatProblem),
      };
      ctx.out(JSON.stringify(report, null, 2));
      return 1;
    }
    const report: CheckReport = { ...emptyReport(rules.origin), rulesFrom: source.why };
    const out = json ? () => {} : ctx.out;
    out(`rules: ${rules.origin} (valid)`);
    out(`  read because: ${source.why}`);
    const broker = source.broker;
    const held = await brokerCredentials(ctx, broker, rules.origin);
    if (broker !== undefined && broker.rules !== rules.origin) {
      report.warnings.push(
        `the running broker (pid ${broker.pid}, port ${broker.port}) runs ${broker.rules}, not these rules: until it reloads them (SIGHUP, or restart it on this file) agents get its rules`,
      );
    }
    const heldNote = (id: string) =>
      `  the running broker (pid ${broker?.pid}) holds a credential for ${id}: it read it from its own environment or folder, which this shell does not see`;
    const warnings = report.warnings;
    const sourceCtx: SourceContext = {
      env: ctx.env,
      home: ctx.home,
      cwd: ctx.cwd,
      warn: (m) => warnings.push(m),
    };
    const resolver = createSecretResolver(rules, sourceCtx);
    report.lookupChain = describeChain(rules, resolver, sourceCtx);
    out(`lookup chain for bare names: ${report.lookupChain.join(" → ")}`);
    const rt = await Runtime.build(rules, resolver, homeKey(ctx.home));
    const problems: string[] = [];
    let active = 0;
    for (const p of rt.providers.values()) {
      if (!p.active && p.rule.fromCatalogue) {
        if (!held.has(p.rule.id)) continue;
        out(`${p.rule.id}: no key here`);
        out(heldNote(p.rule.id));
        active++;
        continue;
      }
      const note = defaultPlaceholderNote(p.rule);
      if (note !== undefined) warnings.push(note);
      const one = await reportProvider(p, rules, resolver, out, ctx.home);
      // An OAuth provider before its first login is set up, not broken (decision 98).
      if (one.usable || one.json.state === "oauth_no_login") active++;
      else if (held.has(p.rule.id)) {
        out(heldNote(p.rule.id));
        active++;
        report.providers.push({ ...one.json, heldByBroker: true });
        continue;
      }
      problems.push(...one.problems);
      report.providers.push(one.json);
    }
    if (rules.state?.password !== undefined) {
      // The fleet's Redis password: without it the broker does not start.
      const r = await resolver.resolve(rules.state.password);
      // No fingerprint: a Redis password may be short enough to guess from one.
      const found = r.secret === undefined ? describeResolution(r) : `${r.ref}: from ${r.secret.source}`;
      out(`state: ${rules.state.url}, password ${found}`);
      if (r.secret === undefined) {
        problems.push(`state.password ${r.ref} has no value: ${whereToSet(r.ref, rules)}`);
      }
    } else if (rules.state !== undefined) {
      out(`state: ${rules.state.url}`);
    }
    const inactive = [...rt.providers.values()]
      .filter((p) => !p.active && p.rule.fromCatalogue && !held.has(p.rule.id))
      .map((p) => p.rule.id);
    if (inactive.length > 0) out(`catalogue providers without a key (inactive): ${inactive.join(", ")}`);
    if (active === 0 && problems.length === 0) {
      problems.push(
        "no provider has a credential: export OPENAI_API_KEY (or another provider's key) or add a rule file",
      );
    }
    if (json) {
      Object.assign(report, { inactive, problems });
      // Messages come from sources (a command's stderr, a server's answer): scrubbed like logs.
      ctx.out(knownSecrets.scrub(JSON.stringify(report, null, 2)));
    } else {
      for (const w of warnings) ctx.err(`warning: ${w}`);
      for (const p of problems) ctx.err(`problem: ${p}`);
    }
    return problems.length > 0 ? 1 : 0;
  },
};

/**
 * A provider of the file that names no placeholder variable gets a derived one, which no agent
 * reads by itself: say which (decision 124).
 */
function defaultPlaceholderNote(rule: ProviderRule): string | undefined {
  if (rule.fromCatalogue || Object.hasOwn(CATALOGUE, rule.id) || rule.hosts.length === 0) return;
  // An OAuth provider's agent usually holds its own login (docs/spec.md §19), not a key variable.
  if (!kindOf(rule).keyFromPlaceholder) return;
  const derived = derivedEnvName(rule.id);
  if (rule.placeholder.env.length !== 1 || rule.placeholder.env[0] !== derived) return;
  return `provider "${rule.id}" has no placeholder.env: run and env set its placeholder in ${derived}; point the agent at that variable, or name the one the agent reads with placeholder: { env: NAME }`;
}

/** What `check --json` prints. */
interface CheckReport {
  rules: string | undefined;
  /** Why check read that rule file (decision 144). */
  rulesFrom?: string;
  valid: boolean;
  lookupChain: string[];
  providers: ProviderJson[];
  inactive: string[];
  warnings: string[];
  problems: string[];
}

interface ProviderJson {
  readonly id: string;
  readonly state:
    | "active"
    | "no_credential"
    | "service_account"
    | "oauth"
    | "oauth_no_login"
    | "oauth_no_usable_login";
  readonly kind?: string;
  readonly credentials: readonly CredentialJson[];
  /** OAuth providers: each login's id, state and expiry, never a token. */
  readonly logins?: readonly LoginSummary[];
  /** No credential here, but the running broker holds one (decision 144). */
  readonly heldByBroker?: boolean;
}

interface CredentialJson {
  readonly ref: string;
  readonly found: boolean;
  readonly source?: string;
  readonly fingerprint?: string;
  readonly stale?: boolean;
  readonly attempts: readonly Attempt[];
}

function emptyReport(rules: string | undefined): CheckReport {
  return { rules, valid: true, lookupChain: [], providers: [], inactive: [], warnings: [], problems: [] };
}

function credentialJson(r: Resolution): CredentialJson {
  const secret = r.secret;
  if (secret === undefined) return { ref: r.ref, found: false, attempts: r.attempts };
  return {
    ref: r.ref,
    found: true,
    source: secret.source,
    fingerprint: secret.fingerprint,
    stale: r.attempts.at(-1)?.stale === true,
    attempts: r.attempts,
  };
}

/** `infisical (https://…, project p, environment prod, folder /agents)`, `dotenv (./.env)`, `env` */
function describeChain(rules: Rules, resolver: SecretResolver, ctx: SourceContext): string[] {
  return resolver.order.map((name) => {
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
  });
}

interface Report {
  /** The provider can serve requests. */
  readonly usable: boolean;
  readonly problems: readonly string[];
  readonly json: ProviderJson;
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
  // One report per provider kind (decision 132).
  switch (rule.kind) {
    case "client_credentials":
      return reportClientCredentials(rule, rules, resolver, out);
    case "oauth_login":
      return reportLogins(
        rule,
        home,
        out,
        isOAuthOnly(rule.id) ? `; it never reads ${derivedEnvName(rule.id)} or any other API key` : "",
      );
    case "mcp":
      return reportLogins(rule, home, out, ` (MCP server ${rule.mcp.url})`);
    case "google_service_account":
    case "aws_sigv4":
      return reportServiceAccount(rule, rules, resolver, out);
    case "key_pool":
      return reportKeyPool(p, rules, out);
    default:
      return unhandledKind(rule);
  }
}

/** No login: the broker fetches the token from client_id and client_secret. */
async function reportClientCredentials(
  rule: ClientCredentialsRule,
  rules: Rules,
  resolver: SecretResolver,
  out: (line: string) => void,
): Promise<Report> {
  const id = rule.id;
  const spec = rule.oauth;
  const r = await resolver.resolve(spec.clientSecret!);
  out(
    `${id}: ${r.secret === undefined ? "NO CREDENTIAL" : "OAuth client credentials"} (client_id ${spec.clientId})`,
  );
  out(`  client_secret: ${describeResolution(r)}`);
  return {
    usable: r.secret !== undefined,
    json: {
      id,
      state: r.secret === undefined ? "no_credential" : "oauth",
      kind: "client_credentials",
      credentials: [credentialJson(r)],
    },
    problems:
      r.secret === undefined
        ? [
            `provider "${id}" (client_credentials) is missing its client_secret ${r.ref}: ${whereToSet(r.ref, rules)}`,
          ]
        : [],
  };
}

/** An OAuth provider's credentials are its logins, read from the token store. */
async function reportLogins(
  rule: ProviderRule,
  home: string,
  out: (line: string) => void,
  never: string,
): Promise<Report> {
  const id = rule.id;
  const logins = (await readLogins(home)).filter((l) => l.provider === id).map(describeLogin);
  if (logins.length === 0) {
    out(
      `${id}: inactive — it authenticates only with OAuth logins and has none yet (keybroker auth add ${id})${never}`,
    );
    return { usable: false, problems: [], json: { id, state: "oauth_no_login", credentials: [], logins } };
  }
  out(`${id}: ${logins.length} OAuth login${logins.length === 1 ? "" : "s"}${never}`);
  for (const l of logins) {
    out(`  ${l.id}: ${l.state}${l.expiresAt === undefined ? "" : `, access token until ${l.expiresAt}`}`);
  }
  const usable = logins.some((l) => l.state === "ok");
  return {
    usable,
    problems: [],
    json: { id, state: usable ? "oauth" : "oauth_no_usable_login", credentials: [], logins },
  };
}

/** A key pool: each credential reference's resolution at load. */
function reportKeyPool(p: ProviderState, rules: Rules, out: (line: string) => void): Report {
  const rule = p.rule;
  const id = rule.id;
  out(`${id}: ${p.active ? "active" : "NO CREDENTIAL"}`);
  if (rule.credentials.length === 0) out("  (no credentials listed)");
  for (const r of p.resolutions) out(`  ${describeResolution(r)}`);
  const credentials = p.resolutions.map(credentialJson);
  if (p.active) return { usable: true, problems: [], json: { id, state: "active", credentials } };
  const first = rule.credentials[0];
  return {
    usable: false,
    json: { id, state: "no_credential", credentials },
    problems: [
      first === undefined
        ? `provider "${id}" has no credential: list one under providers.${id}.credentials`
        : `provider "${id}" has no credential: ${whereToSet(first, rules)}${
            rule.credentialAliases.length > 0
              ? ` (or set ${rule.credentialAliases.join(" or ")} instead)`
              : ""
          }`,
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
  const refs = kindOf(rule).signingRefs(rule);
  const resolutions = await Promise.all(refs.map((ref) => resolver.resolve(ref)));
  const missing = resolutions.filter((r) => r.secret === undefined);
  out(`${rule.id}: ${missing.length === 0 ? "service account" : "NO CREDENTIAL"} (${rule.kind})`);
  for (const r of resolutions) out(`  ${describeResolution(r)}`);
  return {
    usable: missing.length === 0,
    json: {
      id: rule.id,
      state: missing.length === 0 ? "service_account" : "no_credential",
      kind: rule.kind,
      credentials: resolutions.map(credentialJson),
    },
    problems: missing.map(
      (r) => `provider "${rule.id}" (${rule.kind}) is missing ${r.ref}: ${whereToSet(r.ref, rules)}`,
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
