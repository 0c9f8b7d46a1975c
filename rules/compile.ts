// A validated rule file → the compiled `Rules` the broker runs on: catalogue merged, defaults
// filled, names normalized, paths made absolute. Runs only on a file that passed the schema
// and the cross-checks, so it does not re-validate.

import { homedir } from "node:os";
import { splitCommandLine } from "../core/command-line.js";
import { hostPortKey, parseHostPort } from "./address.js";
import { DEFAULT_PLACEHOLDER_PREFIX } from "./catalogue.js";
import { camelCase, durationsInMs } from "./compiled-shape.js";
import { absoluteCredentialRef, absolutePath } from "./credential-ref.js";
import { effectiveProvider } from "./effective-provider.js";
import { parseHostPattern } from "./host-pattern.js";
import { kindOf, unhandledKind } from "./kinds/index.js";
import { mergeProviders } from "./provider-defaults.js";
import type { ClientInput, ProviderInput, RuleFile, SourcesInput } from "./schema/index.js";
import { OAUTH_AS_WRITTEN } from "./schema/oauth.js";
import type {
  AwsSigV4Auth,
  ClientRule,
  GoogleServiceAccountAuth,
  InjectSpec,
  OAuthAsWritten,
  OAuthSpec,
  PolicyRule,
  ProviderRule,
  ProviderRuleBase,
  RedisStateConfig,
  Rules,
  SourcesConfig,
  Timeouts,
} from "./types.js";
import { parseByteSize, parseDuration } from "./units.js";

export const DEFAULT_LISTEN = { host: "127.0.0.1", port: 8899 } as const;
export const DEFAULT_INFISICAL_SITE = "https://app.infisical.com";
export const DEFAULT_INFISICAL_TTL_MS = 60_000;
export const DEFAULT_INFISICAL_AUTH = {
  client_id: "env:INFISICAL_CLIENT_ID",
  client_secret: "env:INFISICAL_CLIENT_SECRET",
} as const;

interface Context {
  readonly baseDir: string;
  readonly userHome: string;
}

function list<T>(value: T | readonly T[] | undefined | null): T[] {
  if (value === undefined || value === null) return [];
  return Array.isArray(value) ? [...value] : [value as T];
}

export function compileRules(file: RuleFile, origin: string, baseDir: string, userHome = homedir()): Rules {
  const ctx: Context = { baseDir, userHome };
  const merged = mergeProviders<ProviderInput>(file.providers ?? undefined, file.catalogue ?? true);
  const providers = merged.map((p) => compileProvider(p.id, p.input, p.catalogueEntry, p.fromCatalogue, ctx));

  const resolve = new Map<string, { host: string; port: number }>();
  for (const [key, target] of Object.entries(file.resolve ?? {})) {
    const from = parseHostPort(key);
    resolve.set(hostPortKey(from.host, from.port), parseHostPort(target));
  }
  const upstreamCa = list(file.upstream_ca).map((p) => absolutePath(p, baseDir, userHome));

  return {
    origin,
    listen: compileListen(file.listen),
    intercept: file.intercept ?? "providers",
    upstreamCa,
    resolve,
    sources: compileSources(file.sources ?? undefined, ctx),
    providers,
    fallbacks: Object.fromEntries(
      Object.entries(file.fallbacks ?? {}).map(([id, to]) => [
        id,
        to.map((t) => (typeof t === "string" ? t : t.provider)),
      ]),
    ),
    fallbackModels: Object.fromEntries(
      Object.entries(file.fallbacks ?? {}).map(([id, to]) => [
        id,
        Object.fromEntries(
          to.flatMap((t) =>
            typeof t === "string" || t.model === undefined ? [] : [[t.provider, { ...t.model }]],
          ),
        ),
      ]),
    ),
    clients: compileClients(file.clients ?? undefined, ctx),
    runIsolate: file.run?.isolate ?? undefined,
    approvals: {
      timeoutMs:
        (file.approvals?.timeout === undefined ? undefined : parseDuration(file.approvals.timeout)) ??
        DEFAULT_APPROVAL_TIMEOUT_MS,
      maxPending: file.approvals?.max_pending ?? DEFAULT_APPROVAL_MAX_PENDING,
      maxBytes:
        (file.approvals?.max_bytes === undefined ? undefined : parseByteSize(file.approvals.max_bytes)) ??
        DEFAULT_APPROVAL_MAX_BYTES,
    },
    audit: {
      enabled: file.audit?.enabled ?? true,
      maxBytes:
        (file.audit?.max_size === undefined ? undefined : parseByteSize(file.audit.max_size)) ??
        10 * 1024 * 1024,
      keep: file.audit?.keep ?? 5,
      require: file.audit?.require ?? false,
    },
    scrubResponses: file.scrub?.responses ?? true,
    timeouts: compileTimeouts(file.timeouts ?? undefined),
    limits: file.limits?.connections === undefined ? {} : { connections: file.limits.connections },
    accessLog: file.log?.access ?? false,
    ...(file.notify ? { notify: splitCommandLine(file.notify.slice("cmd:".length)) } : {}),
    ...(file.state === undefined ? {} : { state: compileState(file.state, ctx, upstreamCa) }),
  };
}

const DEFAULT_STATE_PREFIX = "keybroker:";

function compileState(
  state: NonNullable<RuleFile["state"]>,
  ctx: Context,
  upstreamCa: readonly string[],
): RedisStateConfig {
  const url = typeof state === "string" ? state : state.url;
  // A rediss:// server is verified as an upstream is: system roots plus upstream_ca (docs/spec.md §3.7).
  const ca = new URL(url).protocol === "rediss:" && upstreamCa.length > 0 ? { ca: upstreamCa } : {};
  if (typeof state === "string") return { kind: "redis", url, prefix: DEFAULT_STATE_PREFIX, ...ca };
  return {
    kind: "redis",
    url,
    ...(state.password === undefined
      ? {}
      : { password: absoluteCredentialRef(state.password, ctx.baseDir, ctx.userHome) }),
    prefix: state.prefix ?? DEFAULT_STATE_PREFIX,
    ...ca,
  };
}

/** docs/spec.md §16: a held request is refused (403 approval_timeout) after this long by default. */
export const DEFAULT_APPROVAL_TIMEOUT_MS = 120_000;
/** docs/spec.md §3.10: held requests per broker, and bytes of their bodies, by default (decision 108). */
export const DEFAULT_APPROVAL_MAX_PENDING = 64;
export const DEFAULT_APPROVAL_MAX_BYTES = 64 * 1024 * 1024;

export const DEFAULT_TIMEOUTS: Timeouts = {
  handshakeMs: 10_000,
  headersMs: 30_000,
  keepAliveMs: 60_000,
  tunnelIdleMs: 15 * 60_000,
  upstreamMs: 30 * 60_000,
};

/** Each `timeouts:` key given, in milliseconds, over its default (`keep_alive` → `keepAliveMs`). */
function compileTimeouts(t: RuleFile["timeouts"] | undefined): Timeouts {
  return { ...DEFAULT_TIMEOUTS, ...durationsInMs(t) };
}

function compileListen(listen: RuleFile["listen"]): Rules["listen"] {
  if (listen === undefined || listen === null) return { ...DEFAULT_LISTEN };
  if (typeof listen === "number") return { host: DEFAULT_LISTEN.host, port: listen };
  return parseHostPort(listen, { allowPortZero: true });
}

function compileInject(inject: ProviderInput["inject"]): InjectSpec {
  let headers = [...new Set(list(inject?.header).map((h) => h.toLowerCase()))];
  const query = inject?.query;
  const basic = inject?.basic;
  // With no injection point at all, the credential goes where most APIs take it.
  if (headers.length === 0 && query === undefined && basic === undefined) headers = ["authorization"];
  const first = headers[0];
  const format =
    inject?.format ??
    (first === undefined ? undefined : first === "authorization" ? "Bearer {secret}" : "{secret}");
  return {
    headers,
    ...(query === undefined ? {} : { query }),
    ...(basic === undefined
      ? {}
      : { basic: basic.username === undefined ? {} : { username: basic.username } }),
    ...(format === undefined ? {} : { format }),
  };
}

function compilePolicy(policy: ProviderInput["policy"]): PolicyRule[] {
  return (policy ?? []).map((rule) => {
    const action = rule.deny === undefined ? "approve" : "deny";
    const matcher = rule.deny ?? rule.approve ?? {};
    return {
      action,
      methods: list(matcher.method).map((m) => m.toUpperCase()),
      paths: list(matcher.path),
      ...(matcher.case === "insensitive" ? { ignoreCase: true as const } : {}),
      ...(matcher.roles === undefined ? {} : { roles: list(matcher.roles) }),
      ...(matcher.clients === undefined ? {} : { clients: list(matcher.clients) }),
      ...(matcher.launch === undefined ? {} : { launches: list(matcher.launch) }),
      ...durationField("timeoutMs", matcher.timeout),
    };
  });
}

function compileGoogleServiceAccount(auth: ProviderInput["auth"], ctx: Context): GoogleServiceAccountAuth {
  const ref = (r: string): string => absoluteCredentialRef(r, ctx.baseDir, ctx.userHome);
  return {
    kind: "google_service_account",
    key: ref(auth?.google_service_account ?? ""),
    ...(auth?.scopes === undefined ? {} : { scopes: [...auth.scopes] }),
    ...durationField("tokenTimeoutMs", auth?.token_timeout),
  };
}

function compileAwsSigV4(auth: ProviderInput["auth"], ctx: Context): AwsSigV4Auth {
  const aws = auth?.aws_sigv4;
  if (aws === undefined) throw new Error("aws_sigv4 chosen without its block");
  const ref = (r: string): string => absoluteCredentialRef(r, ctx.baseDir, ctx.userHome);
  return {
    kind: "aws_sigv4",
    region: aws.region,
    service: aws.service,
    accessKeyId: ref(aws.access_key_id),
    secretAccessKey: ref(aws.secret_access_key),
    ...(aws.session_token === undefined ? {} : { sessionToken: ref(aws.session_token) }),
  };
}

function compileProvider(
  id: string,
  given: ProviderInput,
  catalogueEntry: ProviderInput | undefined,
  fromCatalogue: boolean,
  ctx: Context,
): ProviderRule {
  // An MCP server (docs/spec.md §15): its host bound, its origin mounted, OAuth with a code and PKCE.
  const shape = effectiveProvider(id, given, catalogueEntry);
  const { kind, env } = shape;
  // An MCP server's credentials are its logins, whatever a catalogue entry under it wrote.
  const input: ProviderInput = kind === "mcp" ? { ...given, credentials: [] } : given;
  const prefix =
    input.placeholder?.prefix ?? catalogueEntry?.placeholder?.prefix ?? DEFAULT_PLACEHOLDER_PREFIX;
  const value = input.placeholder?.value;
  // Only a key pool's key is in its placeholder variable: an OAuth provider's credentials are
  // its logins (docs/spec.md §8), a service account's are its parts. Without `credentials`, the key is
  // read from the first placeholder variable that has a value (decision 122): the others are
  // its aliases, tried in order. (An id ending in -oauth without `oauth:` is refused earlier.)
  const keyed = kindOf({ kind }).keyFromPlaceholder;
  const defaultCredentials = keyed ? env.slice(0, 1) : [];
  const credentials = (input.credentials ?? defaultCredentials).map((r) =>
    absoluteCredentialRef(r, ctx.baseDir, ctx.userHome),
  );
  const credentialAliases = keyed && input.credentials === undefined ? env.slice(1) : [];

  const pool = input.pool ?? {};
  const retryBodyLimit =
    pool.retry_body_limit === undefined ? undefined : parseByteSize(pool.retry_body_limit);
  const cooldownMs = pool.cooldown === undefined ? undefined : parseDuration(pool.cooldown);

  const mount = shape.mount;
  const upstream = typeof shape.upstream === "string" ? shape.upstream.replace(/\/+$/, "") : undefined;
  const base: ProviderRuleBase = {
    id,
    kind,
    hosts: ((shape.hosts ?? []) as readonly string[]).map(parseHostPattern),
    inject: compileInject(input.inject),
    credentials,
    credentialAliases,
    pool: {
      strategy: pool.strategy ?? "fill_first",
      ...(pool.affinity === undefined ? {} : { affinity: pool.affinity }),
      ...(retryBodyLimit === undefined ? {} : { retryBodyLimit }),
      ...(cooldownMs === undefined ? {} : { cooldownMs }),
    },
    headers: {
      set: Object.fromEntries(Object.entries(input.headers?.set ?? {}).map(([k, v]) => [k.toLowerCase(), v])),
      remove: [...new Set((input.headers?.remove ?? []).map((h) => h.toLowerCase()))],
    },
    placeholder: { env, prefix, ...(value === undefined ? {} : { value }) },
    policy: compilePolicy(input.policy),
    ...(mount === undefined ? {} : { mount }),
    ...(upstream === undefined ? {} : { upstream }),
    allowPrivateUpstream: input.allow_private_upstream ?? false,
    ...durationField("timeoutMs", input.timeout),
    fromCatalogue,
  };
  return withKind(base, input, ctx);
}

/**
 * The fields of the kind chosen (decision 132). The schema and the cross-checks have made sure
 * the keys a kind needs are there, and that no other kind's keys are.
 */
function withKind(base: ProviderRuleBase, input: ProviderInput, ctx: Context): ProviderRule {
  const kind = base.kind;
  switch (kind) {
    case "key_pool":
      return { ...base, kind };
    case "oauth_login":
    case "client_credentials":
      return { ...base, kind, oauth: compileOAuth(input.oauth ?? {}, ctx) };
    case "mcp": {
      const url = input.mcp ?? "";
      const metadata = input.oauth?.client_metadata_url;
      return {
        ...base,
        kind,
        oauth: compileOAuth(input.oauth ?? {}, ctx, true),
        mcp: { url, ...(metadata === undefined ? {} : { clientMetadataUrl: metadata }) },
      };
    }
    case "google_service_account":
      return { ...base, kind, auth: compileGoogleServiceAccount(input.auth, ctx) };
    case "aws_sigv4":
      return { ...base, kind, auth: compileAwsSigV4(input.auth, ctx) };
    default:
      return unhandledKind(kind);
  }
}

export const DEFAULT_OAUTH_MAX_RESPONSE_BYTES = 1024 * 1024;
export const DEFAULT_OAUTH_TOKEN_TIMEOUT_MS = 10_000;

function compileOAuth(oauth: NonNullable<ProviderInput["oauth"]>, ctx: Context, mcp = false): OAuthSpec {
  const grant = mcp
    ? "pkce"
    : (oauth.grant ??
      (oauth.device_authorization_endpoint !== undefined
        ? "device"
        : oauth.authorization_endpoint !== undefined
          ? "pkce"
          : "device"));
  const asWritten = Object.fromEntries(
    OAUTH_AS_WRITTEN.flatMap((key) => (oauth[key] === undefined ? [] : [[camelCase(key), oauth[key]]])),
  ) as OAuthAsWritten;
  return {
    grant,
    ...asWritten,
    clientId: oauth.client_id ?? "",
    ...(oauth.client_secret === undefined
      ? {}
      : { clientSecret: absoluteCredentialRef(oauth.client_secret, ctx.baseDir, ctx.userHome) }),
    ...(oauth.public_client_secret === undefined ? {} : { publicClientSecret: oauth.public_client_secret }),
    ...(oauth.id_token_issuer === undefined ? {} : { idTokenIssuer: oauth.id_token_issuer }),
    clientAuth: oauth.client_secret === undefined ? "none" : (oauth.client_auth ?? "client_secret_basic"),
    scopes: [...(oauth.scopes ?? [])],
    authorizeParams: { ...(oauth.authorize_params ?? {}) },
    tokenParams: { ...(oauth.token_params ?? {}) },
    tokenHeaders: Object.fromEntries(
      Object.entries(oauth.token_headers ?? {}).map(([k, v]) => [k.toLowerCase(), v]),
    ),
    maxResponseBytes:
      (oauth.max_response_bytes === undefined ? undefined : parseByteSize(oauth.max_response_bytes)) ??
      DEFAULT_OAUTH_MAX_RESPONSE_BYTES,
    tokenTimeoutMs:
      (oauth.token_timeout === undefined ? undefined : parseDuration(oauth.token_timeout)) ??
      DEFAULT_OAUTH_TOKEN_TIMEOUT_MS,
  };
}

function compileSources(sources: SourcesInput | undefined, ctx: Context): SourcesConfig {
  const infisical = sources?.infisical;
  const cmd = sources?.cmd;
  const order =
    sources?.order ?? (infisical === undefined ? ["dotenv", "env"] : ["infisical", "dotenv", "env"]);
  const auth = infisical?.auth ?? DEFAULT_INFISICAL_AUTH;
  const ref = (r: string): string => absoluteCredentialRef(r, ctx.baseDir, ctx.userHome);
  return {
    order: [...order],
    ...(sources?.dotenv === undefined
      ? {}
      : { dotenv: absolutePath(sources.dotenv, ctx.baseDir, ctx.userHome) }),
    ...(infisical === undefined
      ? {}
      : {
          infisical: {
            siteUrl: (infisical.site_url ?? DEFAULT_INFISICAL_SITE).replace(/\/+$/, ""),
            projectId: infisical.project_id,
            environment: infisical.environment,
            path: infisical.path ?? "/",
            clientId: ref(auth.client_id),
            clientSecret: ref(auth.client_secret),
            ttlMs:
              infisical.ttl === undefined
                ? DEFAULT_INFISICAL_TTL_MS
                : (parseDuration(infisical.ttl) ?? DEFAULT_INFISICAL_TTL_MS),
            ...durationField("timeoutMs", infisical.timeout),
            ...durationField("graceMs", infisical.grace),
          },
        }),
    ...(cmd === undefined ? {} : { cmd: durationsInMs(cmd) }),
  };
}

/** `{ [key]: ms }` for a duration given in the file, `{}` when it is not (the default applies). */
function durationField<K extends string>(key: K, value: string | number | undefined): { [P in K]?: number } {
  const ms = value === undefined ? undefined : parseDuration(value);
  return (ms === undefined ? {} : { [key]: ms }) as { [P in K]?: number };
}

function compileClients(
  clients: Readonly<Record<string, ClientInput | null>> | undefined,
  ctx: Context,
): ClientRule[] {
  if (clients === undefined || Object.keys(clients).length === 0) {
    return [{ name: "default", providers: "*", role: "owner" }];
  }
  return Object.entries(clients).map(([name, client]): ClientRule => {
    const providers = client?.providers ?? "*";
    return {
      name,
      ...(client?.token === undefined
        ? {}
        : { token: absoluteCredentialRef(client.token, ctx.baseDir, ctx.userHome) }),
      providers: providers === "*" ? "*" : [...providers],
      role: client?.role ?? "user",
      ...(client?.limits === undefined ? {} : { rpm: client.limits.rpm }),
    };
  });
}
