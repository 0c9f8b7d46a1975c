// `providers.<id>.oauth` (docs/spec.md §8) and `providers.<id>.mcp` (docs/spec.md §15): how keybroker logs in,
// and what each grant needs beside the others.
import * as z from "zod";
import { checkUrl, httpsOrLoopbackHttp, noCredentials, noFragment, scheme } from "../url.js";
import { expect, listOf, matching, parsedString, strict } from "./messages.js";
import {
  byteSize,
  credentialRefSchema,
  endpointUrl,
  headerName,
  headerValue,
  nonEmpty,
  positiveDuration,
  RESERVED_HEADERS,
} from "./values.js";

/** Parameters keybroker sets itself in OAuth requests: not overridable by extra parameters. */
export const RESERVED_OAUTH_PARAMS = new Set([
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

export const oauthParams = z.record(
  matching(/^[A-Za-z0-9._~-]+$/, "a parameter name", "is not a valid parameter name").refine(
    (name) => !RESERVED_OAUTH_PARAMS.has(name),
    "keybroker sets this parameter itself — remove it",
  ),
  z.string(expect("a string")).refine((v) => !/[\r\n\0]/.test(v), "cannot contain line breaks or NUL"),
  expect("a map of parameter: value"),
);

/** Where the login's browser is sent back: a loopback http URL with a port, or an https URL. */
export const redirectUriSchema = parsedString("a redirect URI", (value) => {
  checkUrl(value, 'write "http://127.0.0.1:8765/callback"', [
    scheme(
      (url) =>
        url.protocol === "https:" ||
        (url.protocol === "http:" && (url.hostname === "127.0.0.1" || url.hostname === "localhost")),
      "must be http://127.0.0.1:<port>/..., http://localhost:<port>/... or an https:// URL",
    ),
  ]);
});

/** docs/spec.md §8: how keybroker obtains, refreshes and revokes a provider's OAuth tokens. */
export const oauthSchema = strict({
  grant: z.enum(["device", "pkce", "client_credentials"]).optional(),
  issuer: endpointUrl.optional(),
  device_authorization_endpoint: endpointUrl.optional(),
  authorization_endpoint: endpointUrl.optional(),
  token_endpoint: endpointUrl.optional(),
  revocation_endpoint: endpointUrl.optional(),
  /** Where the agent checks its token (Google's tokeninfo): a phantom in its body is swapped there (docs/spec.md §19). */
  token_info_endpoint: endpointUrl.optional(),
  /** Where the agent reads who signed in with its token (Google's userinfo): swapped there too. */
  userinfo_endpoint: endpointUrl.optional(),
  /** Required, except for an MCP server (docs/spec.md §15), whose client may be registered at login. */
  client_id: nonEmpty().optional(),
  /** docs/spec.md §15: the client ID metadata document keybroker presents to an MCP server's AS. */
  client_metadata_url: endpointUrl.optional(),
  client_secret: credentialRefSchema.optional(),
  /**
   * An installed app's client secret that its vendor publishes as not secret (Google's, in
   * Gemini CLI's source): written as is, sent in the body (decision 160).
   */
  public_client_secret: nonEmpty().optional(),
  /** The `iss` of the server's id tokens when it is not the token endpoint's origin (Google's). */
  id_token_issuer: endpointUrl.optional(),
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
  /**
   * The device authorization carries a PKCE challenge (S256) and the device-code poll its
   * verifier, as Qwen's authorization server requires (decision 174).
   */
  device_pkce: z.boolean(expect("true or false")).optional(),
  /**
   * A refresh sends the refresh token in this header instead of the body, as Nous Portal wants
   * it (decision 175).
   */
  refresh_token_header: headerName
    .refine(
      (name) => !RESERVED_HEADERS.has(name.toLowerCase()) && !/^(authorization|content-type)$/i.test(name),
      "keybroker sets this header on token requests itself — choose another",
    )
    .optional(),
  /**
   * The field of the token answer that names the API this login is served at (Qwen's
   * `resource_url`, Nous Portal's `inference_base_url`): kept with the login (decision 174).
   */
  api_base_field: matching(/^[A-Za-z0-9_.-]+$/, "a field name", "is not a valid field name")
    .refine(
      (name) => !/^(access_token|refresh_token|id_token|token_type|expires_in|scope)$/.test(name),
      "names a field of the token answer keybroker reads itself (a token is never shown) — name the field that holds the API's address",
    )
    .optional(),
});

export type OAuthInput = z.infer<typeof oauthSchema>;

/** The `oauth:` keys compiled as written, only camel-cased (`OAuthAsWritten` in types.ts). */
export const OAUTH_AS_WRITTEN = [
  "issuer",
  "device_authorization_endpoint",
  "authorization_endpoint",
  "token_endpoint",
  "revocation_endpoint",
  "token_info_endpoint",
  "userinfo_endpoint",
  "redirect_uri",
  "device_pkce",
  "refresh_token_header",
  "api_base_field",
] as const satisfies readonly (keyof OAuthInput)[];
export type RefineContext = z.core.$RefinementCtx<unknown>;

/** What an `oauth:` block needs beside a provider without `mcp:` (an MCP server discovers it). */
export function checkOAuth(oauth: OAuthInput, ctx: RefineContext): void {
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
  if (oauth.public_client_secret !== undefined && oauth.client_secret !== undefined) {
    issue(["public_client_secret"], "give client_secret or public_client_secret, not both");
  }
}

/** docs/spec.md §15: an MCP server is reached at its URL; keybroker binds its host and logs in for it. */
export const mcpUrlSchema = parsedString("an MCP server URL", (value) => {
  checkUrl(value, 'write the server\'s URL, such as "https://mcp.example.com/mcp"', [
    // Plain http only on loopback (a local server, the conformance suite's): served at the mount.
    scheme(
      httpsOrLoopbackHttp,
      'must be an https:// URL, such as "https://mcp.example.com/mcp" (http:// only for 127.0.0.1, ::1 and localhost)',
    ),
    noCredentials(),
    noFragment("must not have a #fragment"),
  ]);
});

/** The keys an MCP provider sets itself, and why they cannot be given beside `mcp:`. */
export const MCP_SETS: Record<string, string> = {
  hosts: "mcp binds the server's host itself — remove hosts",
  upstream: "mcp serves the server's origin at the mount itself — remove upstream",
  credentials: "an MCP server's credentials are its logins (keybroker auth add) — remove credentials",
  auth: "an MCP server authenticates with OAuth — remove auth",
  inject: "keybroker sends the access token as Authorization: Bearer to an MCP server — remove inject",
};

/** An `oauth:` block beside `mcp:` overrides discovery; it logs in with a code and PKCE only. */
export function checkMcp(
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
