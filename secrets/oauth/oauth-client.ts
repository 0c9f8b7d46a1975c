// The protocol messages of docs/spec.md §8, made with oauth4webapi: discovery (RFC 8414), device
// authorization (RFC 8628), authorization code with PKCE (RFC 7636) and RFC 9207 `iss`,
// refresh (RFC 6749), client credentials, revocation (RFC 7009). Every request goes through
// the capped fetch (keybroker's upstream agent, size cap, time limit).
import * as oauth from "oauth4webapi";
import type { Dispatcher } from "undici";
import type { OAuthSpec } from "../../rules/types.js";
import { cappedFetch, OAuthEndpointError } from "./capped-fetch.js";

export interface Tokens {
  readonly accessToken: string;
  readonly refreshToken?: string;
  readonly idToken?: string;
  /** Seconds, as the server said. */
  readonly expiresIn?: number;
  readonly scope?: string;
  /** The API this login is served at, from the answer's `oauth.api_base_field` (decision 174). */
  readonly apiBase?: string;
}

export interface DeviceStart {
  readonly deviceCode: string;
  readonly userCode: string;
  readonly verificationUri: string;
  readonly verificationUriComplete?: string;
  readonly expiresIn: number;
  readonly interval: number;
  /** `oauth.device_pkce`: the PKCE verifier the poll proves the start with (never shown). */
  readonly verifier?: string;
}

/** An error answer of the authorization server (`invalid_grant`, `access_denied`, ...). */
export class OAuthServerError extends Error {
  override name = "OAuthServerError";
  readonly error: string;
  readonly status: number;

  constructor(error: string, status: number, description: string | undefined) {
    super(`the authorization server answered ${error}${description ? `: ${description.slice(0, 200)}` : ""}`);
    this.error = error;
    this.status = status;
  }
}

/** Converts oauth4webapi's errors into OAuthServerError / OAuthEndpointError. */
function translate(err: unknown): never {
  if (err instanceof oauth.ResponseBodyError)
    throw new OAuthServerError(err.error, err.status, err.error_description);
  if (err instanceof OAuthEndpointError) throw err;
  if (err instanceof oauth.OperationProcessingError || err instanceof oauth.UnsupportedOperationError) {
    const cause = (err as { cause?: unknown }).cause;
    if (cause instanceof Response && cause.status >= 500) {
      throw new OAuthEndpointError(`the authorization server answered ${cause.status}`, true, err);
    }
    if (cause instanceof Response && (cause.status === 400 || cause.status === 401)) {
      throw new OAuthServerError(`http_${cause.status}`, cause.status, undefined);
    }
  }
  throw err;
}

export class OAuthClient {
  readonly provider: string;
  readonly spec: OAuthSpec;
  readonly #fetch: ReturnType<typeof cappedFetch>;
  readonly #clientSecret: () => Promise<string | undefined>;
  #server: Promise<oauth.AuthorizationServer> | undefined;

  constructor(
    provider: string,
    spec: OAuthSpec,
    dispatcher: Dispatcher | (() => Dispatcher),
    clientSecret: () => Promise<string | undefined> = async () => undefined,
    /** The authorization server's metadata when already known (an MCP login's): no discovery. */
    server?: oauth.AuthorizationServer,
  ) {
    this.provider = provider;
    if (server !== undefined) this.#server = Promise.resolve(server);
    this.spec = spec;
    this.#clientSecret = clientSecret;
    this.#fetch = cappedFetch({
      dispatcher,
      maxBytes: spec.maxResponseBytes,
      timeoutMs: spec.tokenTimeoutMs,
      headers: spec.tokenHeaders,
    });
  }

  #options(extra: Record<string, string> = {}, signal?: AbortSignal) {
    const params = { ...this.spec.tokenParams, ...extra };
    return {
      [oauth.customFetch]: this.#fetch as unknown as typeof fetch,
      [oauth.allowInsecureRequests]: true,
      ...(Object.keys(params).length === 0 ? {} : { additionalParameters: params }),
      ...(signal === undefined ? {} : { signal }),
    };
  }

  /** The endpoints: those the rule lists, over those discovered from `issuer`. */
  server(): Promise<oauth.AuthorizationServer> {
    this.#server ??= this.#discover().catch((err) => {
      this.#server = undefined;
      throw err;
    });
    return this.#server;
  }

  async #discover(): Promise<oauth.AuthorizationServer> {
    const s = this.spec;
    let found: oauth.AuthorizationServer | undefined;
    if (s.issuer !== undefined) {
      const issuer = new URL(s.issuer);
      try {
        // RFC 8414 metadata first; a server that has only OpenID metadata (oidc-provider,
        // many OpenID providers) answers 404 there, and is asked at openid-configuration.
        let res = await oauth.discoveryRequest(issuer, { ...this.#options(), algorithm: "oauth2" });
        if (res.status === 404) {
          res = await oauth.discoveryRequest(issuer, { ...this.#options(), algorithm: "oidc" });
        }
        found = await oauth.processDiscoveryResponse(issuer, res);
      } catch (err) {
        translate(err);
      }
    }
    const endpoint = s.tokenEndpoint ?? s.authorizationEndpoint ?? s.deviceAuthorizationEndpoint ?? "";
    const as: oauth.AuthorizationServer = {
      ...(found ?? { issuer: s.issuer ?? s.idTokenIssuer ?? new URL(endpoint).origin }),
      ...(s.tokenEndpoint === undefined ? {} : { token_endpoint: s.tokenEndpoint }),
      ...(s.authorizationEndpoint === undefined ? {} : { authorization_endpoint: s.authorizationEndpoint }),
      ...(s.deviceAuthorizationEndpoint === undefined
        ? {}
        : { device_authorization_endpoint: s.deviceAuthorizationEndpoint }),
      ...(s.revocationEndpoint === undefined ? {} : { revocation_endpoint: s.revocationEndpoint }),
    };
    if (as.token_endpoint === undefined) {
      throw new Error(`the metadata of ${s.issuer} names no token_endpoint — set oauth.token_endpoint`);
    }
    return as;
  }

  get #client(): oauth.Client {
    return { client_id: this.spec.clientId };
  }

  async #clientAuth(): Promise<oauth.ClientAuth> {
    if (this.spec.publicClientSecret !== undefined)
      return oauth.ClientSecretPost(this.spec.publicClientSecret);
    if (this.spec.clientAuth === "none") return oauth.None();
    const secret = await this.#clientSecret();
    if (secret === undefined) {
      throw new Error(
        `the client_secret of provider "${this.provider}" (${this.spec.clientSecret}) has no value`,
      );
    }
    return this.spec.clientAuth === "client_secret_post"
      ? oauth.ClientSecretPost(secret)
      : oauth.ClientSecretBasic(secret);
  }

  async startDevice(signal?: AbortSignal): Promise<DeviceStart> {
    try {
      const as = await this.server();
      const params: Record<string, string> = { ...this.spec.authorizeParams };
      if (this.spec.scopes.length > 0) params.scope = this.spec.scopes.join(" ");
      // Qwen's server binds the device code to a PKCE challenge, proven at the poll (decision 174).
      const verifier = this.spec.devicePkce === true ? oauth.generateRandomCodeVerifier() : undefined;
      if (verifier !== undefined) {
        params.code_challenge = await oauth.calculatePKCECodeChallenge(verifier);
        params.code_challenge_method = "S256";
      }
      const res = await oauth.deviceAuthorizationRequest(as, this.#client, await this.#clientAuth(), params, {
        ...this.#options({}, signal),
        additionalParameters: undefined,
      } as oauth.DeviceAuthorizationRequestOptions);
      const d = await oauth.processDeviceAuthorizationResponse(as, this.#client, res);
      return {
        deviceCode: d.device_code,
        userCode: d.user_code,
        verificationUri: d.verification_uri,
        ...(d.verification_uri_complete === undefined
          ? {}
          : { verificationUriComplete: d.verification_uri_complete }),
        expiresIn: d.expires_in,
        interval: d.interval ?? 5,
        ...(verifier === undefined ? {} : { verifier }),
      };
    } catch (err) {
      translate(err);
    }
  }

  async pollDevice(
    start: Pick<DeviceStart, "deviceCode" | "verifier">,
    signal?: AbortSignal,
  ): Promise<Tokens> {
    try {
      const as = await this.server();
      const res = await oauth.deviceCodeGrantRequest(
        as,
        this.#client,
        await this.#clientAuth(),
        start.deviceCode,
        this.#options(start.verifier === undefined ? {} : { code_verifier: start.verifier }, signal),
      );
      return this.#tokens(await oauth.processDeviceCodeResponse(as, this.#client, res));
    } catch (err) {
      translate(err);
    }
  }

  /** The address the browser is sent to, for a code with PKCE. */
  async authorizeUrl(redirectUri: string, state: string, challenge: string): Promise<URL> {
    const as = await this.server();
    if (as.authorization_endpoint === undefined) {
      throw new Error(
        `provider "${this.provider}" has no authorization_endpoint — set oauth.authorization_endpoint`,
      );
    }
    const url = new URL(as.authorization_endpoint);
    const p = url.searchParams;
    p.set("response_type", "code");
    p.set("client_id", this.spec.clientId);
    p.set("redirect_uri", redirectUri);
    p.set("code_challenge", challenge);
    p.set("code_challenge_method", "S256");
    p.set("state", state);
    if (this.spec.scopes.length > 0) p.set("scope", this.spec.scopes.join(" "));
    for (const [k, v] of Object.entries(this.spec.authorizeParams)) p.set(k, v);
    return url;
  }

  /** Checks a callback (state, and `iss` when sent, RFC 9207): its parameters, or a throw. */
  async checkCallback(callback: URL, state: string): Promise<URLSearchParams> {
    try {
      return oauth.validateAuthResponse(await this.server(), this.#client, callback, state);
    } catch (err) {
      translate(err);
    }
  }

  async exchangeCode(params: URLSearchParams, redirectUri: string, verifier: string): Promise<Tokens> {
    try {
      const as = await this.server();
      const res = await oauth.authorizationCodeGrantRequest(
        as,
        this.#client,
        await this.#clientAuth(),
        params,
        redirectUri,
        verifier,
        this.#options(),
      );
      return this.#tokens(
        await oauth.processAuthorizationCodeResponse(as, this.#client, await withTokenType(res)),
      );
    } catch (err) {
      translate(err);
    }
  }

  async refresh(refreshToken: string): Promise<Tokens> {
    try {
      const as = await this.server();
      const header = this.spec.refreshTokenHeader;
      // Nous Portal takes the refresh token in a header, never in the body (decision 175).
      const res =
        header === undefined
          ? await oauth.refreshTokenGrantRequest(
              as,
              this.#client,
              await this.#clientAuth(),
              refreshToken,
              this.#options(),
            )
          : await oauth.genericTokenEndpointRequest(
              as,
              this.#client,
              await this.#clientAuth(),
              "refresh_token",
              { ...this.spec.tokenParams },
              {
                [oauth.customFetch]: this.#fetch as unknown as typeof fetch,
                [oauth.allowInsecureRequests]: true,
                headers: { [header]: refreshToken },
              },
            );
      return this.#tokens(
        await oauth.processRefreshTokenResponse(as, this.#client, await withTokenType(res)),
      );
    } catch (err) {
      translate(err);
    }
  }

  async clientCredentials(): Promise<Tokens> {
    try {
      const as = await this.server();
      const params: Record<string, string> = { ...this.spec.tokenParams };
      if (this.spec.scopes.length > 0) params.scope = this.spec.scopes.join(" ");
      const res = await oauth.clientCredentialsGrantRequest(
        as,
        this.#client,
        await this.#clientAuth(),
        params,
        {
          [oauth.customFetch]: this.#fetch as unknown as typeof fetch,
          [oauth.allowInsecureRequests]: true,
        },
      );
      return this.#tokens(await oauth.processClientCredentialsResponse(as, this.#client, res));
    } catch (err) {
      translate(err);
    }
  }

  /** Revokes a token where a revocation endpoint is known; false when there is none. */
  async revoke(token: string, hint: "refresh_token" | "access_token"): Promise<boolean> {
    try {
      const as = await this.server();
      if (as.revocation_endpoint === undefined) return false;
      const res = await oauth.revocationRequest(as, this.#client, await this.#clientAuth(), token, {
        [oauth.customFetch]: this.#fetch as unknown as typeof fetch,
        [oauth.allowInsecureRequests]: true,
        additionalParameters: { token_type_hint: hint },
      });
      await oauth.processRevocationResponse(res);
      return true;
    } catch (err) {
      translate(err);
    }
  }

  /** The answer's tokens, and the API base it names when the provider says where to read it. */
  #tokens(r: oauth.TokenEndpointResponse): Tokens {
    const field = this.spec.apiBaseField;
    const base = field === undefined ? undefined : r[field];
    return { ...tokensOf(r), ...(typeof base === "string" && base !== "" ? { apiBase: base } : {}) };
  }
}

/**
 * A successful token answer without `token_type` read as a bearer one (decision 160): some
 * agents' servers leave it out, and the access token is used as a bearer token all the same.
 */
async function withTokenType(res: Response): Promise<Response> {
  if (res.status !== 200 || !/json/i.test(res.headers.get("content-type") ?? "")) return res;
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return new Response(text, { status: res.status, headers: res.headers });
  }
  if (typeof body === "object" && body !== null && !("token_type" in body))
    return new Response(JSON.stringify({ ...body, token_type: "bearer" }), {
      status: 200,
      headers: res.headers,
    });
  return new Response(text, { status: res.status, headers: res.headers });
}

function tokensOf(r: oauth.TokenEndpointResponse): Tokens {
  return {
    accessToken: r.access_token,
    ...(r.refresh_token === undefined ? {} : { refreshToken: r.refresh_token }),
    ...(typeof r.id_token === "string" ? { idToken: r.id_token } : {}),
    ...(typeof r.expires_in === "number" ? { expiresIn: r.expires_in } : {}),
    ...(r.scope === undefined ? {} : { scope: r.scope }),
  };
}
