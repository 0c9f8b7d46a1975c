// Google service accounts (docs/spec.md §9): an RS256 JWT signed with native crypto from the key file,
// exchanged at the key's token_uri for an access token, which is cached until shortly before
// it expires. One exchange in flight at a time; token-endpoint answers are capped and timed out.
import { createPrivateKey, createSign, type KeyObject } from "node:crypto";
import type { Dispatcher } from "undici";
import { BrokerError } from "../core/errors.js";
import { knownSecrets } from "../core/scrub.js";
import { Secret } from "./secret.js";

export const DEFAULT_GOOGLE_SCOPE = "https://www.googleapis.com/auth/cloud-platform";
export const TOKEN_RESPONSE_LIMIT = 1024 * 1024;
export const TOKEN_TIMEOUT_MS = 15_000;
/** Refresh this long before the token's expiry. */
const REFRESH_MARGIN_MS = 5 * 60_000;

export interface ServiceAccountKey {
  readonly clientEmail: string;
  readonly tokenUri: string;
  readonly keyId: string | undefined;
  readonly privateKey: KeyObject;
}

/** Parses a service-account key file's JSON; errors never quote the file's content. */
export function parseServiceAccountKey(json: string, provider: string): ServiceAccountKey {
  let data: Record<string, unknown>;
  try {
    data = JSON.parse(json) as Record<string, unknown>;
  } catch {
    throw new BrokerError(
      "credential_unavailable",
      `the service-account key of provider "${provider}" is not JSON`,
      {
        provider,
        hint: "point auth.google_service_account at the key file Google gave you",
      },
    );
  }
  const email = data.client_email;
  const tokenUri = data.token_uri ?? "https://oauth2.googleapis.com/token";
  const pem = data.private_key;
  if (typeof email !== "string" || typeof tokenUri !== "string" || typeof pem !== "string") {
    throw new BrokerError(
      "credential_unavailable",
      `the service-account key of provider "${provider}" lacks client_email, token_uri or private_key`,
      { provider, hint: "download a new JSON key for the service account" },
    );
  }
  knownSecrets.add(pem);
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey(pem);
  } catch {
    throw new BrokerError("credential_unavailable", `the private key of ${email} cannot be read`, {
      provider,
    });
  }
  return {
    clientEmail: email,
    tokenUri,
    keyId: typeof data.private_key_id === "string" ? data.private_key_id : undefined,
    privateKey,
  };
}

function b64url(data: string | Buffer): string {
  return Buffer.from(data).toString("base64url");
}

/** The signed JWT assertion of the JWT-bearer grant (RFC 7523). */
export function signAssertion(key: ServiceAccountKey, scopes: readonly string[], now = Date.now()): string {
  const iat = Math.floor(now / 1000);
  const header = { alg: "RS256", typ: "JWT", ...(key.keyId ? { kid: key.keyId } : {}) };
  const claims = { iss: key.clientEmail, scope: scopes.join(" "), aud: key.tokenUri, iat, exp: iat + 3600 };
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`;
  const signature = createSign("RSA-SHA256").update(input).sign(key.privateKey);
  return `${input}.${b64url(signature)}`;
}

/** Reads a body up to `limit` bytes; more is an error. */
export async function readCapped(body: Dispatcher.ResponseData["body"], limit: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > limit) {
      body.destroy();
      throw new Error(`the answer is larger than ${limit} bytes`);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString("utf8");
}

interface CachedToken {
  readonly token: Secret;
  readonly expiresAt: number;
}

export class GoogleTokenSource {
  #cached: CachedToken | undefined;
  #inflight: Promise<CachedToken> | undefined;

  constructor(
    private readonly provider: string,
    private readonly scopes: readonly string[],
    /** Returns the key file's JSON (resolved through the sources each time a token is minted). */
    private readonly keyJson: () => Promise<string>,
    /** Sends the token request (through the broker's upstream agent: `resolve`, `upstream_ca`). */
    private readonly send: (opts: Dispatcher.RequestOptions) => Promise<Dispatcher.ResponseData>,
    private readonly timeoutMs = TOKEN_TIMEOUT_MS,
  ) {}

  /** A valid access token, minting a new one when the cached one is close to expiry. */
  async token(now = Date.now()): Promise<Secret> {
    if (this.#cached !== undefined && this.#cached.expiresAt - REFRESH_MARGIN_MS > now)
      return this.#cached.token;
    this.#inflight ??= this.#exchange().finally(() => {
      this.#inflight = undefined;
    });
    return (await this.#inflight).token;
  }

  /** The upstream rejected the token: the next request mints a new one. */
  invalidate(): void {
    this.#cached = undefined;
  }

  async #exchange(): Promise<CachedToken> {
    const key = parseServiceAccountKey(await this.keyJson(), this.provider);
    const fail = (why: string, cause?: unknown) =>
      new BrokerError(
        "credential_unavailable",
        `could not get an access token for ${key.clientEmail}: ${why}`,
        {
          provider: this.provider,
          hint: `check the service account and its token endpoint ${new URL(key.tokenUri).host}`,
          cause,
        },
      );
    const form = new URLSearchParams({
      grant_type: "urn:ietf:params:oauth:grant-type:jwt-bearer",
      assertion: signAssertion(key, this.scopes),
    }).toString();
    let text: string;
    let status: number;
    try {
      const url = new URL(key.tokenUri);
      const res = await this.send({
        origin: url.origin,
        path: url.pathname + url.search,
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", accept: "application/json" },
        body: form,
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      status = res.statusCode;
      text = await readCapped(res.body, TOKEN_RESPONSE_LIMIT);
    } catch (err) {
      const e = err as Error & { code?: string };
      const timedOut =
        e.name === "TimeoutError" ||
        e.code === "UND_ERR_HEADERS_TIMEOUT" ||
        e.code === "UND_ERR_BODY_TIMEOUT";
      throw fail(timedOut ? `the token endpoint did not answer within ${this.timeoutMs} ms` : e.message, err);
    }
    let data: { access_token?: unknown; expires_in?: unknown; error?: unknown };
    try {
      data = JSON.parse(text) as typeof data;
    } catch {
      throw fail(`the token endpoint answered ${status} without JSON`);
    }
    if (status !== 200 || typeof data.access_token !== "string" || data.access_token === "") {
      throw fail(
        `the token endpoint answered ${status}${typeof data.error === "string" ? ` (${data.error})` : ""}`,
      );
    }
    knownSecrets.add(data.access_token);
    const seconds = typeof data.expires_in === "number" && data.expires_in > 0 ? data.expires_in : 3600;
    this.#cached = {
      token: new Secret(
        data.access_token,
        `google_service_account:${key.clientEmail}`,
        "google_service_account",
      ),
      expiresAt: Date.now() + seconds * 1000,
    };
    return this.#cached;
  }
}
