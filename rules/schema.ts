// The rule file (SPEC §4) as one zod schema: the validator and, through z.infer, the type of a
// parsed file. Every object is strict. The schema checks what one value can tell on its own;
// what needs the whole file (names that must exist, duplicates, the catalogue) is checked in
// cross-check.ts, and defaults are filled in compile.ts.
import * as z from "zod";
import { splitCommandLine } from "../core/command-line.js";
import { parseHostPort } from "./address.js";
import { CredentialRefError, parseCredentialRef } from "./credential-ref.js";
import { type PathProblem, suggest, unknownKeyMessage } from "./errors.js";
import { parseHostPattern } from "./host-pattern.js";
import { parseByteSize, parseDuration } from "./units.js";

type ErrorMap = z.core.$ZodErrorMap;
type RawIssue = z.core.$ZodRawIssue;

// ---------------------------------------------------------------------------------------------
// Messages. A message may quote keys and enum words, never a free string value: a credential
// pasted into the wrong place must not end up in an error.

/** How a value found in the file is named in a message: "a number", "a list", ... */
export function describeValue(value: unknown): string {
  if (value === undefined) return "nothing";
  if (value === null) return "an empty value";
  if (Array.isArray(value)) return "a list";
  switch (typeof value) {
    case "string":
      return "a string";
    case "number":
      return "a number";
    case "boolean":
      return `${value}`;
    case "object":
      return "a map";
    default:
      return typeof value;
  }
}

const EXPECTED_NAMES: Record<string, string> = {
  string: "a string",
  number: "a number",
  int: "a whole number",
  boolean: "true or false",
  object: "a map (key: value)",
  record: "a map (key: value)",
  array: "a list",
};

function expectedMessage(what: string, input: unknown): string {
  if (input === undefined) return `required key is missing (expected ${what})`;
  return `expected ${what}, got ${describeValue(input)}`;
}

/** The fallback message for every issue a schema does not phrase itself. */
export const ruleFileErrorMap: ErrorMap = (issue) => {
  switch (issue.code) {
    case "invalid_type":
      return expectedMessage(EXPECTED_NAMES[issue.expected] ?? issue.expected, issue.input);
    case "invalid_value": {
      const values = issue.values.map((v) => JSON.stringify(v));
      const input = issue.input;
      const shown =
        (typeof input === "string" && input.length <= 40) ||
        typeof input === "number" ||
        typeof input === "boolean"
          ? JSON.stringify(input)
          : describeValue(input);
      const close = typeof input === "string" ? suggest(input, issue.values.map(String)) : undefined;
      const hint = close === undefined ? "" : ` — did you mean "${close}"?`;
      return values.length === 1
        ? `expected ${values[0]}, got ${shown}${hint}`
        : `${shown} is not one of ${values.join(", ")}${hint}`;
    }
    case "invalid_union":
      return `expected a different kind of value, got ${describeValue(issue.input)}`;
    case "too_small":
      if (issue.origin === "string") return "must not be empty";
      if (issue.origin === "array")
        return `needs at least ${issue.minimum} entr${issue.minimum === 1 ? "y" : "ies"}`;
      return `must be at least ${issue.minimum}`;
    case "too_big":
      if (issue.origin === "string") return `is too long (at most ${issue.maximum} characters)`;
      return `must be at most ${issue.maximum}`;
    case "unrecognized_keys":
      return issue.keys.map((key) => `unknown key ${JSON.stringify(key)}`).join("\n");
    default:
      return undefined;
  }
};

/** Type errors phrased as `expected <what>, got <found>`. */
function expect(what: string): { error: ErrorMap } {
  return {
    error: (issue: RawIssue) =>
      issue.code === "invalid_type" || issue.code === "invalid_union"
        ? expectedMessage(what, issue.input)
        : undefined,
  };
}

/**
 * A strict object: each unknown key is an issue line with a "did you mean" among the keys
 * allowed here. (One issue carries all unknown keys of the object, one per message line.)
 */
function strict<Shape extends z.core.$ZodLooseShape>(
  shape: Shape,
  what = "a map (key: value)",
  /** Unknown keys people are known to try here, with what to write instead. */
  hints: Readonly<Record<string, string>> = {},
) {
  const allowed = Object.keys(shape);
  return z.strictObject(shape, {
    error: (issue: RawIssue) => {
      if (issue.code === "unrecognized_keys")
        return issue.keys
          .map((k) =>
            Object.hasOwn(hints, k)
              ? `unknown key ${JSON.stringify(k)} — ${hints[k]}`
              : unknownKeyMessage(k, allowed),
          )
          .join("\n");
      if (issue.code === "invalid_type") return expectedMessage(what, issue.input);
      return undefined;
    },
  });
}

function listOf<T extends z.ZodType>(item: T, what: string) {
  return z.array(item, expect(what));
}

function oneOrMany<T extends z.ZodType>(item: T, what: string) {
  return z.union([item, z.array(item)], expect(what));
}

/** A string checked by a parser that throws a message-bearing error. */
function parsedString(what: string, check: (value: string) => void) {
  return z.string(expect(what)).superRefine((value, ctx) => {
    try {
      check(value);
    } catch (err) {
      ctx.addIssue(err instanceof Error ? err.message : String(err));
    }
  });
}

function matching(pattern: RegExp, what: string, fix: string) {
  return z.string(expect(what)).regex(pattern, fix);
}

// ---------------------------------------------------------------------------------------------
// Values

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** An HTTP header name (RFC 9110 token). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Headers a rule may not set: framing, routing and connection management belong to keybroker. */
const RESERVED_HEADERS = new Set([
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "upgrade",
  "te",
  "trailer",
  "proxy-authorization",
  "proxy-authenticate",
  "proxy-connection",
]);

export const PROVIDER_ID = /^[a-z][a-z0-9._-]{0,62}$/;
export const CLIENT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

export const credentialRefSchema = z
  .string(expect("a credential reference string"))
  .superRefine((value, ctx) => {
    try {
      parseCredentialRef(value);
    } catch (err) {
      ctx.addIssue(err instanceof CredentialRefError ? err.message : "not a credential reference");
    }
  });

const hostPatternSchema = parsedString("a host pattern", (value) => {
  parseHostPattern(value);
});

const envName = matching(
  NAME,
  "a variable name",
  "must be a variable name: letters, digits and _, not starting with a digit",
);
const headerName = matching(HEADER_NAME, "a header name", "is not a valid header name");
const headerValue = matching(
  /^[^\r\n\0]*$/,
  "a header value string",
  "a header value cannot contain line breaks or NUL",
);
const settableHeaderName = headerName.refine(
  (name) => !RESERVED_HEADERS.has(name.toLowerCase()),
  "keybroker manages this header itself — remove it from headers.set",
);
const nonEmpty = (what = "a string") => z.string(expect(what)).min(1);
const filePath = nonEmpty("a file path").refine(
  (p) => !/^~[^/]/.test(p) && !p.includes("\0"),
  "use an absolute path, a path relative to the rule file, or ~/ for your home folder",
);

const duration = z
  .union(
    [z.number(), z.string()],
    expect('a duration such as "60s", "5m" or "500ms", or a number of seconds'),
  )
  .refine(
    (value) => parseDuration(value) !== undefined,
    'is not a duration — write "500ms", "60s", "5m", "1h", or a number of seconds',
  );

/** A duration above zero (a timeout). */
const positiveDuration = duration.refine(
  (value) => (parseDuration(value) ?? 1) > 0,
  'must be more than zero, as in "5s"',
);

const byteSize = z
  .union([z.number(), z.string()], expect('a size such as "4MiB", or a number of bytes'))
  .refine(
    (value) => parseByteSize(value) !== undefined,
    'is not a size — write "4MiB", "512KiB", or a number of bytes',
  );

function isLoopbackUrlHost(hostname: string): boolean {
  return hostname === "localhost" || hostname === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}

/** An https URL; plain http only toward loopback (local fakes and tests). */
const endpointUrl = parsedString("a URL", (value) => {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error('is not a URL — write "https://host/path"');
  }
  if (url.username !== "" || url.password !== "") throw new Error("must not carry credentials");
  if (url.protocol === "https:") return;
  if (url.protocol === "http:" && isLoopbackUrlHost(url.hostname)) return;
  throw new Error("must be an https:// URL (http:// is accepted only for 127.0.0.1, ::1 and localhost)");
});

/** A reverse-mode upstream: an https origin with an optional base path (no query or fragment). */
export const upstreamSchema = parsedString("an https origin", (value) => {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error('is not a URL — write an origin such as "https://api.example.com"');
  }
  if (url.protocol !== "https:")
    throw new Error('must be an https:// origin such as "https://api.example.com"');
  if (url.username !== "" || url.password !== "") throw new Error("must not carry credentials");
  if (url.search !== "" || url.hash !== "") {
    throw new Error(
      `must be an origin with an optional base path, such as "${url.origin}/v1" — no query or fragment`,
    );
  }
});

/** `notify: "cmd:<argv>"`: a command run with one JSON event on stdin (SPEC §16). */
export const notifySchema = parsedString('a command reference "cmd:<argv>"', (value) => {
  if (!value.startsWith("cmd:")) {
    throw new Error('must start with "cmd:", e.g. "cmd:/usr/local/bin/notify-chat --channel ops"');
  }
  if (splitCommandLine(value.slice(4)).length === 0) {
    throw new Error('names no command: write the program and its arguments after "cmd:"');
  }
});

export const mountSchema = matching(
  /^\/p\/[A-Za-z0-9._~-]+\/?$/,
  "a mount path",
  'must be "/p/<name>" (one path segment after /p/)',
);

const listenSchema = z
  .union([z.string(), z.number()], expect('"host:port" or a port number'))
  .superRefine((value, ctx) => {
    if (typeof value === "number") {
      if (!Number.isInteger(value) || value < 0 || value > 65535)
        ctx.addIssue("a port is a whole number 0-65535");
      return;
    }
    try {
      parseHostPort(value, { allowPortZero: true });
    } catch (err) {
      ctx.addIssue(err instanceof Error ? err.message : String(err));
    }
  });

// ---------------------------------------------------------------------------------------------
// Sections

const injectSchema = strict({
  header: oneOrMany(headerName, "a header name or a list of header names").optional(),
  query: matching(
    /^[A-Za-z0-9._~-]+$/,
    "a query parameter name",
    "is not a valid query parameter name",
  ).optional(),
  basic: strict({ username: z.string(expect("a string")).optional() }).optional(),
  format: z
    .string(expect("a string"))
    .refine((f) => f.includes("{secret}"), 'must contain "{secret}", as in "Bearer {secret}"')
    .refine((f) => !/[\r\n\0]/.test(f), "cannot contain line breaks")
    .optional(),
});

const poolSchema = strict({
  strategy: z.enum(["fill_first", "round_robin", "least_used"]).optional(),
  affinity: z.literal("client").optional(),
  retry_body_limit: byteSize.optional(),
  cooldown: duration.optional(),
});

const headersSchema = strict({
  set: z.record(settableHeaderName, headerValue, expect("a map of header names to values")).optional(),
  remove: listOf(headerName, "a list of header names").optional(),
});

const placeholderSchema = strict({
  /** One variable, or a list that all get the same placeholder (decision 122). */
  env: z
    .union(
      [envName, z.array(envName).min(1, "list at least one variable name")],
      expect("a variable name or a list of them"),
    )
    .optional(),
  prefix: matching(
    /^[A-Za-z0-9._-]{0,32}$/,
    "a string",
    "a prefix is at most 32 letters, digits, dots, dashes or underscores",
  ).optional(),
  value: matching(
    /^[\x21-\x7e]{8,512}$/,
    "a string",
    "a fixed placeholder is 8 or more printable characters without spaces",
  ).optional(),
});

/** SPEC §16: what a client may do, from everything (owner) to safe methods only (guest). */
export const ROLES = ["owner", "admin", "user", "guest"] as const;
const role = z.enum(ROLES, expect(`a role: ${ROLES.join(", ")}`));
const clientName = matching(
  CLIENT_NAME,
  "a client name",
  "is not a valid client name — use letters, digits, '.', '_' or '-'",
);

const policyMatcherSchema = strict({
  method: oneOrMany(
    matching(/^[A-Za-z]+$/, "an HTTP method", "is not an HTTP method"),
    "a method or a list of methods",
  ).optional(),
  path: oneOrMany(
    matching(/^\/\S*$/, "a path glob", 'a path glob starts with "/", as in "/repos/**"'),
    "a path glob or a list of path globs",
  ).optional(),
  /** `insensitive`: the paths match in any case, for an API that ignores case in paths. */
  case: z.enum(["sensitive", "insensitive"]).optional(),
  /** The rule applies only to clients with one of these roles. */
  roles: oneOrMany(role, "a role or a list of roles").optional(),
  /** The rule applies only to these clients. */
  clients: oneOrMany(clientName, "a client name or a list of client names").optional(),
  /** The rule applies only to `run --isolate` launches of these commands (decision 117). */
  launch: oneOrMany(
    matching(/^[^\s/]+$/, "a command name", "is not a command name — give its base name, as in claude"),
    "a command name or a list of command names",
  ).optional(),
  /** approve only: how long a held request waits for an answer (default approvals.timeout). */
  timeout: positiveDuration.optional(),
});

const policyRuleSchema = strict({
  deny: policyMatcherSchema.optional(),
  approve: policyMatcherSchema.optional(),
}).superRefine((rule, ctx) => {
  if ((rule.deny === undefined) === (rule.approve === undefined)) {
    ctx.addIssue(
      'a policy rule is either "deny: {method, path}" or "approve: {method, path}" — exactly one of them',
    );
  }
  if (rule.deny?.timeout !== undefined) {
    ctx.addIssue({
      code: "custom",
      path: ["deny", "timeout"],
      message: "a deny rule refuses at once — timeout belongs to approve rules",
    });
  }
});

const awsSigV4Schema = strict({
  region: matching(/^[a-z0-9-]+$/, "a region name", "is not a region name, such as us-east-1"),
  service: matching(/^[a-z0-9-]+$/, "a service name", "is not a service name, such as bedrock"),
  access_key_id: credentialRefSchema,
  secret_access_key: credentialRefSchema,
  session_token: credentialRefSchema.optional(),
});

const authSchema = strict({
  google_service_account: credentialRefSchema.optional(),
  scopes: listOf(nonEmpty(), "a list of scopes").optional(),
  /** How long the token endpoint may take (default 15 s). */
  token_timeout: duration.optional(),
  aws_sigv4: awsSigV4Schema.optional(),
}).superRefine((auth, ctx) => {
  if ((auth.google_service_account === undefined) === (auth.aws_sigv4 === undefined)) {
    ctx.addIssue("auth is either google_service_account or aws_sigv4 — exactly one of them");
  } else if (auth.scopes !== undefined && auth.google_service_account === undefined) {
    ctx.addIssue({ code: "custom", message: "scopes belong to google_service_account", path: ["scopes"] });
  } else if (auth.token_timeout !== undefined && auth.google_service_account === undefined) {
    ctx.addIssue({
      code: "custom",
      message: "token_timeout belongs to google_service_account",
      path: ["token_timeout"],
    });
  }
});

/** Parameters keybroker sets itself in OAuth requests: not overridable by extra parameters. */
const RESERVED_OAUTH_PARAMS = new Set([
  "client_id",
  "client_secret",
  "grant_type",
  "code",
  "code_verifier",
  "code_challenge",
  "code_challenge_method",
  "device_code",
  "refresh_token",
  "redirect_uri",
  "response_type",
  "state",
  "scope",
]);

const oauthParams = z.record(
  matching(/^[A-Za-z0-9._~-]+$/, "a parameter name", "is not a valid parameter name").refine(
    (name) => !RESERVED_OAUTH_PARAMS.has(name),
    "keybroker sets this parameter itself — remove it",
  ),
  z.string(expect("a string")).refine((v) => !/[\r\n\0]/.test(v), "cannot contain line breaks or NUL"),
  expect("a map of parameter: value"),
);

/** Where the login's browser is sent back: a loopback http URL with a port, or an https URL. */
const redirectUriSchema = parsedString("a redirect URI", (value) => {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error('is not a URL — write "http://127.0.0.1:8765/callback"');
  }
  if (url.protocol === "https:") return;
  if (url.protocol !== "http:" || (url.hostname !== "127.0.0.1" && url.hostname !== "localhost")) {
    throw new Error("must be http://127.0.0.1:<port>/..., http://localhost:<port>/... or an https:// URL");
  }
});

/** SPEC §8: how keybroker obtains, refreshes and revokes a provider's OAuth tokens. */
const oauthSchema = strict({
  grant: z.enum(["device", "pkce", "client_credentials"]).optional(),
  issuer: endpointUrl.optional(),
  device_authorization_endpoint: endpointUrl.optional(),
  authorization_endpoint: endpointUrl.optional(),
  token_endpoint: endpointUrl.optional(),
  revocation_endpoint: endpointUrl.optional(),
  /** Required, except for an MCP server (SPEC §15), whose client may be registered at login. */
  client_id: nonEmpty().optional(),
  /** SPEC §15: the client ID metadata document keybroker presents to an MCP server's AS. */
  client_metadata_url: endpointUrl.optional(),
  client_secret: credentialRefSchema.optional(),
  client_auth: z.enum(["client_secret_basic", "client_secret_post"]).optional(),
  scopes: listOf(nonEmpty(), "a list of scopes").optional(),
  authorize_params: oauthParams.optional(),
  token_params: oauthParams.optional(),
  redirect_uri: redirectUriSchema.optional(),
  token_headers: z
    .record(
      headerName.refine(
        (name) => !RESERVED_HEADERS.has(name.toLowerCase()) && !/^(authorization|content-type)$/i.test(name),
        "keybroker sets this header on token requests itself — remove it",
      ),
      headerValue,
      expect("a map of header: value"),
    )
    .optional(),
  max_response_bytes: byteSize.optional(),
  token_timeout: positiveDuration.optional(),
});

type OAuthInput = z.infer<typeof oauthSchema>;
type RefineContext = z.core.$RefinementCtx<unknown>;

/** What an `oauth:` block needs beside a provider without `mcp:` (an MCP server discovers it). */
function checkOAuth(oauth: OAuthInput, ctx: RefineContext): void {
  const discovered = oauth.issuer !== undefined;
  const issue = (path: string[], message: string) =>
    ctx.addIssue({ code: "custom", path: ["oauth", ...path], message });
  const need = (key: keyof OAuthInput, why: string) => {
    if (oauth[key] === undefined && !discovered) issue([key], `required key is missing: ${why}`);
  };
  if (oauth.client_id === undefined) issue(["client_id"], "required key is missing (expected a string)");
  if (oauth.client_metadata_url !== undefined) {
    issue(["client_metadata_url"], "client_metadata_url belongs to an MCP server (mcp:) — remove it");
  }
  need("token_endpoint", "every grant needs the token endpoint (or set issuer to discover it)");
  if (oauth.grant === "device") need("device_authorization_endpoint", "grant device needs it (or issuer)");
  if (oauth.grant === "pkce") need("authorization_endpoint", "grant pkce needs it (or issuer)");
  if (oauth.grant === "client_credentials" && oauth.client_secret === undefined) {
    issue(
      ["client_secret"],
      "required key is missing: grant client_credentials needs a client_secret (a credential reference)",
    );
  }
  if (
    oauth.grant === undefined &&
    !discovered &&
    oauth.device_authorization_endpoint === undefined &&
    oauth.authorization_endpoint === undefined
  ) {
    ctx.addIssue({
      code: "custom",
      path: ["oauth"],
      message:
        "oauth needs device_authorization_endpoint (device grant), authorization_endpoint (code with PKCE), issuer, or grant: client_credentials",
    });
  }
  if (oauth.client_auth !== undefined && oauth.client_secret === undefined) {
    issue(["client_auth"], "client_auth needs a client_secret");
  }
}

/** SPEC §15: an MCP server is reached at its URL; keybroker binds its host and logs in for it. */
const mcpUrlSchema = parsedString("an MCP server URL", (value) => {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error('is not a URL — write the server\'s URL, such as "https://mcp.example.com/mcp"');
  }
  // Plain http only on loopback (a local server, the conformance suite's): served at the mount.
  if (url.protocol !== "https:" && !(url.protocol === "http:" && isLoopbackUrlHost(url.hostname))) {
    throw new Error(
      'must be an https:// URL, such as "https://mcp.example.com/mcp" (http:// only for 127.0.0.1, ::1 and localhost)',
    );
  }
  if (url.username !== "" || url.password !== "") throw new Error("must not carry credentials");
  if (url.hash !== "") throw new Error("must not have a #fragment");
});

/** The keys an MCP provider sets itself, and why they cannot be given beside `mcp:`. */
const MCP_SETS: Record<string, string> = {
  hosts: "mcp binds the server's host itself — remove hosts",
  upstream: "mcp serves the server's origin at the mount itself — remove upstream",
  credentials: "an MCP server's credentials are its logins (keybroker auth add) — remove credentials",
  auth: "an MCP server authenticates with OAuth — remove auth",
  inject: "keybroker sends the access token as Authorization: Bearer to an MCP server — remove inject",
};

/** An `oauth:` block beside `mcp:` overrides discovery; it logs in with a code and PKCE only. */
function checkMcp(
  provider: Record<string, unknown>,
  oauth: OAuthInput | undefined,
  ctx: RefineContext,
): void {
  for (const [key, message] of Object.entries(MCP_SETS)) {
    if (provider[key] !== undefined) ctx.addIssue({ code: "custom", path: [key], message });
  }
  if (oauth === undefined) return;
  const issue = (key: string, message: string) =>
    ctx.addIssue({ code: "custom", path: ["oauth", key], message });
  if (oauth.grant !== undefined && oauth.grant !== "pkce") {
    issue(
      "grant",
      "an MCP server logs in with an authorization code and PKCE — remove grant, or set it to pkce",
    );
  }
  if (oauth.device_authorization_endpoint !== undefined) {
    issue(
      "device_authorization_endpoint",
      "an MCP server logs in with an authorization code and PKCE — remove it",
    );
  }
  if (oauth.client_auth !== undefined && oauth.client_secret === undefined) {
    issue("client_auth", "client_auth needs a client_secret");
  }
  if (oauth.client_secret !== undefined && oauth.client_id === undefined) {
    issue("client_secret", "a client_secret belongs to a configured client_id — add client_id");
  }
}

export const providerSchema = strict({
  hosts: listOf(hostPatternSchema, "a list of host patterns").optional(),
  inject: injectSchema.optional(),
  credentials: listOf(credentialRefSchema, "a list of credential references").optional(),
  pool: poolSchema.optional(),
  headers: headersSchema.optional(),
  placeholder: placeholderSchema.optional(),
  policy: listOf(policyRuleSchema, "a list of deny/approve rules").optional(),
  mount: mountSchema.optional(),
  upstream: upstreamSchema.optional(),
  auth: authSchema.optional(),
  oauth: oauthSchema.optional(),
  /** SPEC §15: the URL of a remote MCP server (Streamable HTTP) keybroker logs in to. */
  mcp: mcpUrlSchema.optional(),
  allow_private_upstream: z.boolean(expect("true or false")).optional(),
  /** How long the upstream may be silent (before its response headers, between body chunks). */
  timeout: positiveDuration.optional(),
}).superRefine((provider, ctx) => {
  if (provider.mcp !== undefined) checkMcp(provider, provider.oauth, ctx);
  else if (provider.oauth !== undefined) checkOAuth(provider.oauth, ctx);
});

const infisicalSchema = strict({
  site_url: endpointUrl.optional(),
  project_id: nonEmpty(),
  environment: nonEmpty(),
  path: matching(/^\/[^\s]*$/, "a folder path", 'a folder path starts with "/", as in "/agents"').optional(),
  auth: strict({ client_id: credentialRefSchema, client_secret: credentialRefSchema }).optional(),
  ttl: duration.optional(),
  timeout: positiveDuration.optional(),
  grace: duration.optional(),
});

const cmdSourceSchema = strict({
  timeout: positiveDuration.optional(),
  ttl: duration.optional(),
  grace: duration.optional(),
});

const sourcesSchema = strict({
  order: listOf(
    z.enum(["infisical", "dotenv", "env"]),
    "a list of sources (infisical, dotenv, env)",
  ).optional(),
  dotenv: filePath.optional(),
  infisical: infisicalSchema.optional(),
  cmd: cmdSourceSchema.optional(),
});

const providerId = matching(
  PROVIDER_ID,
  "a provider id",
  "is not a valid provider id — use lower-case letters, digits, '-', '_' or '.', starting with a letter",
);

const clientSchema = strict({
  token: credentialRefSchema.optional(),
  providers: z
    .union([z.literal("*"), z.array(providerId)], expect('"*" or a list of provider ids'))
    .optional(),
  role: role.optional(),
  /** Requests per minute the client may make (429 client_rate_limited beyond it). */
  limits: strict({
    rpm: z.number(expect("a whole number")).int("must be a whole number").min(1).max(100_000),
  }).optional(),
});

/** `state: redis://…`: a Redis URL, without a password in it (that is a credential reference). */
const redisUrl = parsedString("a redis:// or rediss:// URL", (value) => {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error('is not a URL — write "redis://host:6379/0" or "rediss://host:6380/0"');
  }
  if (url.protocol !== "redis:" && url.protocol !== "rediss:")
    throw new Error('must be a redis:// or rediss:// URL, as in "redis://127.0.0.1:6379/0"');
  if (url.hostname === "") throw new Error('names no host — write "redis://host:6379/0"');
  if (url.password !== "")
    throw new Error("must not carry a password — write state: { url, password: <credential reference> }");
  if (url.search !== "" || url.hash !== "") throw new Error("takes no query or fragment");
  if (!/^\/?(\d{1,2})?$/.test(url.pathname)) throw new Error('the path is a database number, as in "/0"');
});

/** SPEC §17: where the shared state of a fleet lives (default: the home, one broker). */
const stateSchema = z.union(
  [
    redisUrl,
    strict(
      {
        url: redisUrl,
        password: credentialRefSchema.optional(),
        prefix: matching(
          /^[A-Za-z0-9:._-]{1,64}$/,
          "a key prefix",
          'a prefix is up to 64 letters, digits, ":", ".", "_" or "-", as in "keybroker:"',
        ).optional(),
      },
      undefined,
      Object.fromEntries(
        ["ca", "tls", "ca_file", "cacert"].map((k) => [
          k,
          "a rediss:// server is verified with the system's roots plus the files in upstream_ca: list its CA there",
        ]),
      ),
    ),
  ],
  expect("a redis:// URL, or { url, password, prefix }"),
);

const resolveKey = parsedString('"host:port"', (value) => {
  parseHostPort(value);
});
const resolveTarget = parsedString('"address:port"', (value) => {
  parseHostPort(value);
});

/**
 * The whole rule file. Top-level sections and provider/client entries may be left empty in the
 * YAML (`providers:` with everything below commented out, `openai:` to keep the catalogue entry
 * as it is), so they accept null.
 */
export const ruleFileSchema = strict({
  // Required (SPEC §4): a file an editor truncated, or one written for another format, is
  // refused rather than read as "no providers".
  version: z.literal(1, {
    error: (issue) =>
      issue.input === undefined
        ? 'required key is missing: a rule file must say "version: 1" (on its first line, by convention)'
        : undefined,
  }),
  listen: listenSchema.nullish(),
  intercept: z.enum(["providers", "all"]).optional(),
  upstream_ca: oneOrMany(filePath, "a file path or a list of file paths").nullish(),
  resolve: z.record(resolveKey, resolveTarget, expect('a map of "host:port" to "address:port"')).nullish(),
  state: stateSchema.optional(),
  sources: sourcesSchema.nullish(),
  providers: z
    .record(providerId, providerSchema.nullable(), expect("a map of provider ids to providers"))
    .nullish(),
  fallbacks: z
    .record(
      providerId,
      listOf(
        z.union(
          [
            providerId,
            strict({
              provider: providerId,
              /** Rewrites the JSON body's "model" for this fallback: { "gpt-4o": "openai/gpt-4o" }. */
              model: z.record(nonEmpty(), nonEmpty(), expect("a map of model names")).optional(),
            }),
          ],
          expect('a provider id, or { provider: <id>, model: { "<from>": "<to>" } }'),
        ),
        "a list of provider ids",
      ),
      expect("a map of provider ids to lists"),
    )
    .nullish(),
  clients: z
    .record(clientName, clientSchema.nullable(), expect("a map of client names to clients"))
    .nullish(),
  catalogue: z.boolean(expect("true or false")).optional(),
  /** `keybroker run` (decision 116): isolate by default (true), or run plainly without the notice (false). */
  run: strict({
    isolate: z.boolean(expect("true or false")).optional(),
  }).nullish(),
  /** Requests held by `approve` rules (SPEC §16). */
  approvals: strict({
    /** How long a held request waits for an answer; a rule's own timeout wins. Default 120s. */
    timeout: positiveDuration.optional(),
    /** Requests this broker holds at once; beyond, 503 approvals_full (decision 108). Default 64. */
    max_pending: z.number(expect("a whole number")).int("must be a whole number").min(1).optional(),
    /** Bytes of held bodies this broker keeps at once; beyond, 503 approvals_full. Default 64MiB. */
    max_bytes: byteSize.optional(),
  }).nullish(),
  audit: strict({
    enabled: z.boolean(expect("true or false")).optional(),
    max_size: byteSize.optional(),
    keep: z.number(expect("a whole number")).int("must be a whole number").min(1).max(100).optional(),
    /** Refuse to inject (503 audit_unavailable) while the audit log cannot be written. */
    require: z.boolean(expect("true or false")).optional(),
  })
    .superRefine((audit, ctx) => {
      if (audit.require === true && audit.enabled === false) {
        ctx.addIssue({
          code: "custom",
          message: "cannot require an audit log that is turned off (enabled: false): remove one of the two",
          path: ["require"],
        });
      }
    })
    .nullish(),
  scrub: strict({
    /** Scrub echoes of the credential from responses (default true; off only for benchmarks). */
    responses: z.boolean(expect("true or false")).optional(),
  }).nullish(),
  /** How long each stage of a client connection, and the upstream, may take (SPEC §3.8). */
  timeouts: strict({
    handshake: positiveDuration.optional(),
    headers: positiveDuration.optional(),
    keep_alive: positiveDuration.optional(),
    /** A plain tunnel (a host no rule names) with no byte either way for this long is closed. */
    tunnel_idle: positiveDuration.optional(),
    upstream: positiveDuration.optional(),
  }).nullish(),
  limits: strict({
    /** Open client connections; beyond it new ones are refused (default: from the fd limit). */
    connections: z.number(expect("a whole number")).int("must be a whole number").min(1).optional(),
  }).nullish(),
  /** Run once per event that needs a person (approval pending, reauth_required). */
  notify: notifySchema.nullish(),
  log: strict({
    /** One log line per request: client, provider, method, host, path, status, bytes, time. */
    access: z.boolean(expect("true or false")).optional(),
  }).nullish(),
});

/** A parsed, schema-valid rule file: the YAML's shape, before defaults. */
export type RuleFile = z.infer<typeof ruleFileSchema>;
/** One provider entry as written in a rule file or the embedded catalogue. */
export type ProviderInput = z.infer<typeof providerSchema>;
export type ClientInput = z.infer<typeof clientSchema>;
export type SourcesInput = z.infer<typeof sourcesSchema>;

// ---------------------------------------------------------------------------------------------
// Issues → problems

/** Flattens zod issues into one problem per thing to fix, picking the relevant union branch. */
export function schemaProblems(
  issues: readonly z.core.$ZodIssue[],
  prefix: readonly PropertyKey[] = [],
): PathProblem[] {
  const out: PathProblem[] = [];
  for (const issue of issues) {
    const path = [...prefix, ...issue.path];
    switch (issue.code) {
      case "invalid_union": {
        // A branch that got past the type check holds the real problem (e.g. a bad list item).
        const branch = issue.errors.find(
          (issues) =>
            issues.length > 0 &&
            !issues.every(
              (i) => i.path.length === 0 && (i.code === "invalid_type" || i.code === "invalid_value"),
            ),
        );
        if (branch) out.push(...schemaProblems(branch, path));
        else out.push({ path, message: issue.message });
        break;
      }
      case "invalid_key":
        for (const inner of issue.issues) out.push({ path, message: inner.message });
        break;
      case "unrecognized_keys":
        issue.keys.forEach((key, i) => {
          const message = issue.message.split("\n")[i] ?? `unknown key ${JSON.stringify(key)}`;
          out.push({ path, message, key });
        });
        break;
      default:
        out.push({ path, message: issue.message });
    }
  }
  return out;
}
