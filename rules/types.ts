// The compiled rule set: what the broker runs on after a rule file (or the embedded catalogue)
// has been parsed, validated and normalized. Everything the proxy needs is here, already
// checked, so the request path never re-validates.

//
// Where a section's compiled form is its keys as written (camel-cased, durations in ms), its
// type is derived from the schema (rules/schema/) through compiled-shape.ts, so a key is defined
// once; the fields written out here are those the compiler really transforms.

import type { AsWritten, InMs, Listed } from "./compiled-shape.js";
import type { ProviderKindName } from "./kinds/kind.js";
import type { ClientInput, ProviderInput, RuleFile, SourcesInput } from "./schema/index.js";
import type { OAUTH_AS_WRITTEN, OAuthInput } from "./schema/oauth.js";

type PoolInput = NonNullable<ProviderInput["pool"]>;
type InfisicalInput = NonNullable<SourcesInput["infisical"]>;
type ApprovalsInput = NonNullable<RuleFile["approvals"]>;
type AuditInput = NonNullable<RuleFile["audit"]>;
type AuthInput = NonNullable<ProviderInput["auth"]>;
type InjectInput = NonNullable<ProviderInput["inject"]>;
type HeadersInput = NonNullable<ProviderInput["headers"]>;
type PlaceholderInput = NonNullable<ProviderInput["placeholder"]>;
type PolicyRuleInput = NonNullable<ProviderInput["policy"]>[number];
type PolicyMatcherInput = NonNullable<PolicyRuleInput["deny"]>;
type AwsInput = NonNullable<AuthInput["aws_sigv4"]>;
/** `state:` written as a map (a bare URL compiles to the same). */
type RedisStateInput = Extract<NonNullable<RuleFile["state"]>, object>;

/** A host pattern after normalization: `api.openai.com` or a wildcard `*.openai.azure.com`. */
export interface HostPattern {
  /** The pattern as written in the rule file, for messages. */
  readonly source: string;
  /** Lower-cased, punycode, no trailing dot. For a wildcard, the suffix without `*.` */
  readonly host: string;
  /** `*.example.com` matches one or more labels in front of `example.com`, never the apex. */
  readonly wildcard: boolean;
  /** The port this pattern binds to: an explicit `host:port`, else 443. */
  readonly port: number;
}

/**
 * Where the real secret goes in a request: `headers`, the header names (lower-case, from
 * `header`) whose values may carry the placeholder (`authorization` when no injection point is
 * written); as written, the `query` parameter that may carry it, `basic` (swap it inside the
 * decoded credentials of `Authorization: Basic`) and `format`, how keybroker builds the header
 * value itself in reverse mode (`{secret}` is replaced; default `Bearer {secret}` for
 * authorization, `{secret}` otherwise).
 */
export type InjectSpec = { readonly headers: readonly string[] } & Partial<
  AsWritten<InjectInput, "query" | "basic" | "format">
>;

export type PoolStrategy = NonNullable<PoolInput["strategy"]>;

/**
 * One `deny:` or `approve:` rule. `roles` and `clients` as written, made lists: only clients with
 * one of these roles, or these clients (unset = every client); approve's `timeoutMs`, how long a
 * held request waits (unset = `approvals.timeoutMs`). The rest is renamed as it compiles.
 */
export type PolicyRule = Partial<
  Listed<PolicyMatcherInput, "roles" | "clients"> & InMs<PolicyMatcherInput, "timeout">
> & {
  readonly action: keyof PolicyRuleInput;
  /** `method`, upper-case; empty = any. */
  readonly methods: readonly string[];
  /** `path`: globs (micromatch), matched against the canonical path without the query; empty = any. */
  readonly paths: readonly string[];
  /** `case: insensitive`: the paths match whatever the letters' case (an API that ignores it). */
  readonly ignoreCase?: true;
  /** `launch:` only `run --isolate` launches of these commands (base names); unset = anyone. */
  readonly launches?: readonly string[];
};

/** docs/spec.md §16: owner (everything), admin (approvals, resets), user (its providers), guest (safe methods). */
export type Role = NonNullable<ClientInput["role"]>;

/**
 * `auth: { google_service_account }`: `key` is the key file's credential reference; `scopes` as
 * written; `tokenTimeoutMs`, how long the token endpoint may take (unset = 15 s).
 */
export type GoogleServiceAccountAuth = {
  readonly kind: "google_service_account";
  readonly key: string;
} & Partial<AsWritten<AuthInput, "scopes"> & InMs<AuthInput, "token_timeout">>;

/** `auth: { aws_sigv4 }` as written; the keys' parts are credential references. */
export type AwsSigV4Auth = { readonly kind: "aws_sigv4" } & AsWritten<
  AwsInput,
  "region" | "service" | "access_key_id" | "secret_access_key"
> &
  Partial<AsWritten<AwsInput, "session_token">>;

export type ProviderAuth = GoogleServiceAccountAuth | AwsSigV4Auth;

export type OAuthGrant = NonNullable<OAuthInput["grant"]>;

/**
 * The `oauth:` keys compiled as written, only camel-cased: the issuer (RFC 8414: endpoints not
 * listed are discovered from its metadata), the endpoints, the redirect URI. Their type is the
 * schema's (rules/schema/oauth.ts), their list is compile.ts's `OAUTH_AS_WRITTEN`.
 */
export type OAuthAsWritten = Partial<AsWritten<OAuthInput, (typeof OAUTH_AS_WRITTEN)[number]>>;

/**
 * docs/spec.md §8: how keybroker obtains, refreshes and revokes a provider's OAuth tokens. Besides the
 * keys as written: `grant`, the one `auth add` uses (or, for client_credentials, the broker
 * itself), chosen from the endpoints when not written; `scopes` and the extra parameters, empty
 * when not written; `tokenHeaders`, set on every request to the authorization server (names
 * lower-cased); `clientId`, "" for an MCP server without one (registered at login);
 * `clientSecret`, a credential reference (confidential clients); `publicClientSecret`, a
 * published installed-app secret sent in the body, not a credential (decision 160);
 * `idTokenIssuer`, the `iss` of the server's id tokens when not the token endpoint's origin;
 * `clientAuth`, how the client secret is sent,
 * `none` for a public client; the cap on every answer read from the authorization server
 * (`maxResponseBytes`) and the time limit of every request to it (`tokenTimeoutMs`).
 */
export type OAuthSpec = OAuthAsWritten &
  AsWritten<
    OAuthInput,
    "grant" | "client_id" | "scopes" | "authorize_params" | "token_params" | "token_headers"
  > &
  Partial<AsWritten<OAuthInput, "client_secret" | "public_client_secret" | "id_token_issuer">> & {
    readonly clientAuth: NonNullable<OAuthInput["client_auth"]> | "none";
    readonly maxResponseBytes: number;
  } & InMs<OAuthInput, "token_timeout">;

/** docs/spec.md §15: a remote MCP server keybroker logs in to and injects the access token for. */
export interface McpSpec {
  /** The server's URL as written (`https://mcp.example.com/mcp`): the OAuth `resource`. */
  readonly url: string;
  /** `oauth.client_metadata_url`: the client ID metadata document the user hosts. */
  readonly clientMetadataUrl?: string;
}

/** What every provider has, whatever its kind. */
export interface ProviderRuleBase {
  readonly id: string;
  /** How it authenticates, chosen once at compile (decision 132): ask `kindOf(rule)` what that means. */
  readonly kind: ProviderKindName;
  readonly hosts: readonly HostPattern[];
  readonly inject: InjectSpec;
  /** Credential references, in pool order: `NAME`, `env:NAME`, `dotenv:NAME`, `file:PATH`, ... */
  readonly credentials: readonly string[];
  /**
   * Variables tried in order when the only credential (a default one, the first placeholder
   * variable) has no value: the placeholder variable's aliases (decision 122).
   */
  readonly credentialAliases: readonly string[];
  /**
   * `strategy` (default fill_first); `affinity: client` keeps each client on the credential it
   * used last while that one has quota; `retryBodyLimit`, bytes of request body buffered for a
   * retry on another credential (unset = 4 MiB); `cooldownMs` after a quota response that gave no
   * reset time (unset = the pool's default).
   */
  readonly pool: AsWritten<PoolInput, "strategy"> &
    Partial<AsWritten<PoolInput, "affinity"> & InMs<PoolInput, "cooldown">> & {
      readonly retryBodyLimit?: number;
    };
  /** `headers: set/remove` as written, names lower-cased, each empty when not written. */
  readonly headers: AsWritten<HeadersInput>;
  /**
   * `prefix` (the entry's, the catalogue's, else `kb-`) and `value` (a fixed placeholder instead
   * of the derived one) as written; `env`, the environment variables `run`/`env` set to the
   * placeholder, the main one first (decision 122).
   */
  readonly placeholder: AsWritten<PlaceholderInput, "prefix"> &
    Partial<AsWritten<PlaceholderInput, "value">> & { readonly env: readonly string[] };
  readonly policy: readonly PolicyRule[];
  /** Reverse endpoint, e.g. `/p/vertex` (no trailing slash). */
  readonly mount?: string;
  /** Upstream for reverse mode: an origin with an optional base path, e.g. `https://openrouter.ai/api`. */
  readonly upstream?: string;
  /** The provider may reach upstream addresses in loopback/private ranges. */
  readonly allowPrivateUpstream: boolean;
  /** Upstream silence allowed for this provider; unset = `timeouts.upstream`. */
  readonly timeoutMs?: number;
  /** True when the provider came from the embedded catalogue rather than the rule file. */
  readonly fromCatalogue: boolean;
}

/** A pool of keys from credential references (docs/spec.md §5). */
export interface KeyPoolRule extends ProviderRuleBase {
  readonly kind: "key_pool";
}

/** Logins a person makes with `auth add` (device code or PKCE, docs/spec.md §8). */
export interface OAuthLoginRule extends ProviderRuleBase {
  readonly kind: "oauth_login";
  readonly oauth: OAuthSpec;
}

/** A token the broker fetches itself from client_id and client_secret (docs/spec.md §8). */
export interface ClientCredentialsRule extends ProviderRuleBase {
  readonly kind: "client_credentials";
  readonly oauth: OAuthSpec;
}

/** A remote MCP server (docs/spec.md §15): the `pkce` grant, with what the rule file's `oauth:` overrides. */
export interface McpRule extends ProviderRuleBase {
  readonly kind: "mcp";
  readonly oauth: OAuthSpec;
  readonly mcp: McpSpec;
}

/** A Google service account: a token minted from the key authorizes each request last (docs/spec.md §9). */
export interface GoogleServiceAccountRule extends ProviderRuleBase {
  readonly kind: "google_service_account";
  readonly auth: GoogleServiceAccountAuth;
}

/** AWS Signature V4: each request is signed last (docs/spec.md §9). */
export interface AwsSigV4Rule extends ProviderRuleBase {
  readonly kind: "aws_sigv4";
  readonly auth: AwsSigV4Auth;
}

/**
 * A compiled provider, one shape per kind (decision 132): `switch (rule.kind)` narrows to the
 * fields that kind has, so nothing asks which of `auth`, `oauth` or `mcp` is set.
 */
export type ProviderRule =
  | KeyPoolRule
  | OAuthLoginRule
  | ClientCredentialsRule
  | McpRule
  | GoogleServiceAccountRule
  | AwsSigV4Rule;

/** The kinds that log in with OAuth: their pool is logins, their `oauth` is set. */
export type OAuthRule = OAuthLoginRule | ClientCredentialsRule | McpRule;

/** The kinds a signer authorizes last. */
export type SignedRule = GoogleServiceAccountRule | AwsSigV4Rule;

/**
 * A client: its name, its token's credential reference if it has one, `"*"` or the provider ids
 * it may use (default `"*"`), its role (default user), `limits.rpm` as `rpm` (unset = no cap).
 */
export type ClientRule = { readonly name: string } & Partial<AsWritten<ClientInput, "token">> &
  AsWritten<ClientInput, "providers" | "role"> &
  Partial<AsWritten<NonNullable<ClientInput["limits"]>>>;

export type SourceName = "infisical" | "dotenv" | "env" | "file" | "cmd";

/**
 * `sources.infisical`: the keys as written, with `siteUrl` (default Infisical's cloud, no
 * trailing slash), `path` (default `/`) and the machine identity's `clientId` and `clientSecret`
 * (credential references; default `env:INFISICAL_CLIENT_ID`/`_SECRET`) filled in; `ttlMs` (default
 * 1 min); `timeoutMs`, the longest a lookup waits (unset = 5 s); `graceMs`, how long the last
 * value is still served once Infisical fails (unset = 10 min).
 */
export type InfisicalConfig = AsWritten<InfisicalInput, "site_url" | "project_id" | "environment" | "path"> &
  AsWritten<NonNullable<InfisicalInput["auth"]>> &
  InMs<InfisicalInput, "ttl"> &
  Partial<InMs<InfisicalInput, "timeout" | "grace">>;

/**
 * `sources.cmd`: how `cmd:` references run and how long their output is reused, each unset for
 * its default: `timeoutMs` (the command is stopped, 10 s), `ttlMs` (5 min), `graceMs` (how long
 * the last value is still served once the command fails, 10 min).
 */
export type CmdConfig = Partial<InMs<NonNullable<SourcesInput["cmd"]>>>;

export interface SourcesConfig {
  /** The lookup chain for bare names; the environment is always appended as last resort. */
  readonly order: readonly ("infisical" | "dotenv" | "env")[];
  /** Absolute path of the `.env` file, or undefined for the default search. */
  readonly dotenv?: string;
  readonly infisical?: InfisicalConfig;
  readonly cmd?: CmdConfig;
}

export interface Rules {
  /** Where the rules came from: a file path, or `embedded default catalogue`. */
  readonly origin: string;
  /** sha256 of the rule file's text as loaded (none for the embedded catalogue alone). */
  readonly digest?: string;
  readonly listen: { readonly host: string; readonly port: number };
  readonly intercept: "providers" | "all";
  /** Absolute paths of extra PEM roots for upstream verification. */
  readonly upstreamCa: readonly string[];
  /** `host:port` (normalized) → `address:port`. */
  readonly resolve: ReadonlyMap<string, { readonly host: string; readonly port: number }>;
  readonly sources: SourcesConfig;
  readonly providers: readonly ProviderRule[];
  readonly fallbacks: Readonly<Record<string, readonly string[]>>;
  /** from → fallback provider → model name mapping applied to the JSON body's "model". */
  readonly fallbackModels: Readonly<
    Record<string, Readonly<Record<string, Readonly<Record<string, string>>>>>
  >;
  readonly clients: readonly ClientRule[];
  /** `run: { isolate }` (decision 116): true isolates by default; false silences the notice. */
  readonly runIsolate?: boolean | undefined;
  /**
   * Requests held by `approve` rules: how long they wait by default, and how many (and how many
   * bytes of body) this broker holds at once.
   */
  readonly approvals: InMs<ApprovalsInput, "timeout"> &
    AsWritten<ApprovalsInput, "max_pending"> & { readonly maxBytes: number };
  /**
   * The audit log: on by default, rotated at `maxBytes`, `keep` rotated files; `require` refuses
   * to inject (503 audit_unavailable) while the audit log cannot be written.
   */
  readonly audit: AsWritten<AuditInput, "enabled" | "keep" | "require"> & { readonly maxBytes: number };
  /** Scrub echoes of credentials from responses (on unless a benchmark turns it off). */
  readonly scrubResponses: boolean;
  readonly timeouts: Timeouts;
  /** `connections`: open client connections at most; unset = derived from the process's fd limit. */
  readonly limits: Partial<AsWritten<NonNullable<RuleFile["limits"]>>>;
  /** `log.access`: one log line per request (also KEYBROKER_ACCESS_LOG=1). */
  readonly accessLog: boolean;
  /** `notify: "cmd:…"` as an argv; unset when the rule file has none (docs/spec.md §16). */
  readonly notify?: readonly string[];
  /** `state:` (docs/spec.md §17): the fleet's shared store; undefined = the home (one broker). */
  readonly state?: RedisStateConfig;
}

/** A fleet's Redis: its URL (no password), the password's credential reference, the key prefix. */
export type RedisStateConfig = { readonly kind: "redis" } & AsWritten<RedisStateInput, "url" | "prefix"> &
  Partial<AsWritten<RedisStateInput, "password">> & {
    /** rediss:// only: the rule file's `upstream_ca` files, trusted besides the system's roots. */
    readonly ca?: readonly string[];
  };

/**
 * How long each stage of a connection may take, in milliseconds (docs/spec.md §3.8): one field per key
 * of `timeouts:` (what each is: rules/schema/file.ts), `tunnel_idle` → `tunnelIdleMs`.
 */
export type Timeouts = InMs<NonNullable<RuleFile["timeouts"]>>;
