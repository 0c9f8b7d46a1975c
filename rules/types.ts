// The compiled rule set: what the broker runs on after a rule file (or the embedded catalogue)
// has been parsed, validated and normalized. Everything the proxy needs is here, already
// checked, so the request path never re-validates.

import type * as z from "zod";
import type { ProviderKindName } from "./kinds/kind.js";
import type { timeoutsSchema } from "./schema/file.js";
import type { OAUTH_AS_WRITTEN, OAuthInput } from "./schema/oauth.js";

type TimeoutsInput = z.infer<typeof timeoutsSchema>;

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

/** Where the real secret goes in a request. */
export interface InjectSpec {
  /** Header names (lower-case) whose values may carry the placeholder. */
  readonly headers: readonly string[];
  /** A query parameter whose value may carry the placeholder. */
  readonly query?: string;
  /** Swap the placeholder inside the decoded credentials of `Authorization: Basic`. */
  readonly basic?: { readonly username?: string };
  /**
   * How keybroker builds the header value itself (reverse mode): `{secret}` is replaced.
   * Default `Bearer {secret}` for authorization, `{secret}` otherwise.
   */
  readonly format?: string;
}

export type PoolStrategy = "fill_first" | "round_robin" | "least_used";

export interface PolicyRule {
  readonly action: "deny" | "approve";
  /** Upper-case methods; empty = any. */
  readonly methods: readonly string[];
  /** Path globs (micromatch), matched against the canonical path without the query; empty = any. */
  readonly paths: readonly string[];
  /** `case: insensitive`: the paths match whatever the letters' case (an API that ignores it). */
  readonly ignoreCase?: true;
  /** Only clients with one of these roles; unset = every client. */
  readonly roles?: readonly Role[];
  /** Only these clients; unset = every client. */
  readonly clients?: readonly string[];
  /** `launch:` only `run --isolate` launches of these commands (base names); unset = anyone. */
  readonly launches?: readonly string[];
  /** approve: how long a held request waits; unset = `approvals.timeoutMs`. */
  readonly timeoutMs?: number;
}

/** SPEC §16: owner (everything), admin (approvals, resets), user (its providers), guest (safe methods). */
export type Role = "owner" | "admin" | "user" | "guest";

export interface GoogleServiceAccountAuth {
  readonly kind: "google_service_account";
  readonly key: string;
  readonly scopes?: readonly string[];
  /** How long the token endpoint may take; default 15 s. */
  readonly tokenTimeoutMs?: number;
}

export interface AwsSigV4Auth {
  readonly kind: "aws_sigv4";
  readonly region: string;
  readonly service: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly sessionToken?: string;
}

export type ProviderAuth = GoogleServiceAccountAuth | AwsSigV4Auth;

export type OAuthGrant = "device" | "pkce" | "client_credentials";

/** `device_authorization_endpoint` → `deviceAuthorizationEndpoint`. */
type CamelCase<S extends string> = S extends `${infer Head}_${infer Tail}`
  ? `${Head}${Capitalize<CamelCase<Tail>>}`
  : S;

/**
 * The `oauth:` keys compiled as written, only camel-cased: the issuer (RFC 8414: endpoints not
 * listed are discovered from its metadata), the endpoints, the redirect URI. Their type is the
 * schema's (rules/schema/oauth.ts), their list is compile.ts's `OAUTH_AS_WRITTEN`.
 */
export type OAuthAsWritten = {
  readonly [K in (typeof OAUTH_AS_WRITTEN)[number] as CamelCase<K>]?: NonNullable<OAuthInput[K]>;
};

/** SPEC §8: how keybroker obtains, refreshes and revokes a provider's OAuth tokens. */
export interface OAuthSpec extends OAuthAsWritten {
  /** The grant `auth add` uses (or, for client_credentials, the broker itself). */
  readonly grant: OAuthGrant;
  /** The client's id; "" for an MCP server without one configured (registered at login). */
  readonly clientId: string;
  /** Credential reference of the client secret (confidential clients). */
  readonly clientSecret?: string;
  /** A published installed-app secret (decision 160), sent in the body; not a credential. */
  readonly publicClientSecret?: string;
  /** `oauth.id_token_issuer`: the `iss` of the server's id tokens, when not the token endpoint's origin. */
  readonly idTokenIssuer?: string;
  /** How the client secret is sent; `none` for a public client. */
  readonly clientAuth: "client_secret_basic" | "client_secret_post" | "none";
  readonly scopes: readonly string[];
  readonly authorizeParams: Readonly<Record<string, string>>;
  readonly tokenParams: Readonly<Record<string, string>>;
  /** Headers set on every request to the authorization server. */
  readonly tokenHeaders: Readonly<Record<string, string>>;
  /** Cap on every answer read from the authorization server. */
  readonly maxResponseBytes: number;
  /** Time limit of every request to the authorization server. */
  readonly tokenTimeoutMs: number;
}

/** SPEC §15: a remote MCP server keybroker logs in to and injects the access token for. */
export interface McpSpec {
  /** The server's URL as written (`https://mcp.example.com/mcp`): the OAuth `resource`. */
  readonly url: string;
  /** `oauth.client_metadata_url`: the client ID metadata document the user hosts. */
  readonly clientMetadataUrl?: string;
}

export interface ProviderRule {
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
  readonly pool: {
    readonly strategy: PoolStrategy;
    /** `client`: keep each client on the credential it used last while that one has quota. */
    readonly affinity?: "client";
    /** Bytes of request body buffered for a retry on another credential; unset = the default (4 MiB). */
    readonly retryBodyLimit?: number;
    /** Cooldown after a quota response that gave no reset time; unset = the pool's default. */
    readonly cooldownMs?: number;
  };
  readonly headers: {
    readonly set: Readonly<Record<string, string>>;
    readonly remove: readonly string[];
  };
  readonly placeholder: {
    /** The environment variables `run`/`env` set to the placeholder, the main one first. */
    readonly env: readonly string[];
    readonly prefix: string;
    /** A fixed placeholder instead of the derived one. */
    readonly value?: string;
  };
  readonly policy: readonly PolicyRule[];
  /** Reverse endpoint, e.g. `/p/vertex` (no trailing slash). */
  readonly mount?: string;
  /** Upstream for reverse mode: an origin with an optional base path, e.g. `https://openrouter.ai/api`. */
  readonly upstream?: string;
  readonly auth?: ProviderAuth;
  /** For an MCP server: the `pkce` grant, with what the rule file's `oauth:` overrides. */
  readonly oauth?: OAuthSpec;
  readonly mcp?: McpSpec;
  /** The provider may reach upstream addresses in loopback/private ranges. */
  readonly allowPrivateUpstream: boolean;
  /** Upstream silence allowed for this provider; unset = `timeouts.upstream`. */
  readonly timeoutMs?: number;
  /** True when the provider came from the embedded catalogue rather than the rule file. */
  readonly fromCatalogue: boolean;
}

export interface ClientRule {
  readonly name: string;
  /** Credential reference of the client's token, if it has one. */
  readonly token?: string;
  /** `"*"` or the provider ids the client may use. */
  readonly providers: "*" | readonly string[];
  readonly role: Role;
  /** `limits.rpm`: requests per minute at most; unset = no cap. */
  readonly rpm?: number;
}

export type SourceName = "infisical" | "dotenv" | "env" | "file" | "cmd";

export interface InfisicalConfig {
  readonly siteUrl: string;
  readonly projectId: string;
  readonly environment: string;
  readonly path: string;
  readonly clientId: string;
  readonly clientSecret: string;
  readonly ttlMs: number;
  /** The longest a lookup waits for Infisical; unset = the default (5 s). */
  readonly timeoutMs?: number;
  /** How long the last value is still served once Infisical fails; unset = the default (10 min). */
  readonly graceMs?: number;
}

/** `sources.cmd`: how `cmd:` references run and how long their output is reused. */
export interface CmdConfig {
  /** The command is stopped after this long; unset = the default (10 s). */
  readonly timeoutMs?: number;
  /** unset = the default (5 min). */
  readonly ttlMs?: number;
  /** How long the last value is still served once the command fails; unset = 10 min. */
  readonly graceMs?: number;
}

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
  readonly approvals: { readonly timeoutMs: number; readonly maxPending: number; readonly maxBytes: number };
  /** The audit log: on by default, rotated at `maxBytes`, `keep` rotated files. */
  readonly audit: {
    readonly enabled: boolean;
    readonly maxBytes: number;
    readonly keep: number;
    /** Refuse to inject (503 audit_unavailable) while the audit log cannot be written. */
    readonly require: boolean;
  };
  /** Scrub echoes of credentials from responses (on unless a benchmark turns it off). */
  readonly scrubResponses: boolean;
  readonly timeouts: Timeouts;
  readonly limits: {
    /** Open client connections at most; unset = derived from the process's fd limit. */
    readonly connections?: number;
  };
  /** `log.access`: one log line per request (also KEYBROKER_ACCESS_LOG=1). */
  readonly accessLog: boolean;
  /** `notify: "cmd:…"` as an argv; unset when the rule file has none (SPEC §16). */
  readonly notify?: readonly string[];
  /** `state:` (SPEC §17): the fleet's shared store; undefined = the home (one broker). */
  readonly state?: RedisStateConfig;
}

/** A fleet's Redis: its URL (no password), the password's credential reference, the key prefix. */
export interface RedisStateConfig {
  readonly kind: "redis";
  readonly url: string;
  readonly password?: string;
  readonly prefix: string;
  /** rediss:// only: the rule file's `upstream_ca` files, trusted besides the system's roots. */
  readonly ca?: readonly string[];
}

/**
 * How long each stage of a connection may take, in milliseconds (SPEC §3.8): one field per key
 * of `timeouts:` (what each is: rules/schema/file.ts), `tunnel_idle` → `tunnelIdleMs`.
 */
export type Timeouts = {
  readonly [K in keyof TimeoutsInput & string as `${CamelCase<K>}Ms`]: number;
};
