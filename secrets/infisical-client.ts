// Infisical through its official SDK with universal auth: login, access-token renewal before
// expiry and after a 401, listing a folder, reading one secret. The SDK keeps no cache, never
// renews by itself and retries a failing call for up to ~65 s, so callers bound their wait
// (refresh-cache.ts) and this client only speaks to the server.
import { isIP, connect as netConnect, type Socket } from "node:net";
import { connect as tlsConnect } from "node:tls";
import type { InfisicalSDK, Secret as SdkSecret } from "@infisical/sdk";
import { knownSecrets } from "../core/scrub.js";
import { loadInfisicalSdk, type SdkLoader } from "./infisical-sdk.js";
import { seconds } from "./refresh-cache.js";
import { messageOf } from "./source.js";

export interface InfisicalClientOptions {
  readonly siteUrl: string;
  readonly projectId: string;
  readonly environment: string;
  /** The machine identity's client id and secret, resolved each time a login is needed. */
  readonly credentials: () => Promise<{ readonly clientId: string; readonly clientSecret: string }>;
  /** How long the reachability check waits for a connection. */
  readonly connectTimeoutMs: number;
  readonly now?: () => number;
  /** How @infisical/sdk is imported (tests make it fail). */
  readonly loadSdk?: SdkLoader;
}

/** A secret's value as Infisical gave it; `hidden` when the identity may not read values. */
export interface InfisicalValue {
  readonly value: string;
  readonly hidden: boolean;
}

export class InfisicalError extends Error {
  override readonly name = "InfisicalError";
  constructor(
    message: string,
    readonly status: number | undefined,
  ) {
    super(message);
  }
}

/** Renew the access token once this share of its lifetime has passed. */
const RENEW_AT = 0.75;
/** How much of a server message goes into an error. */
const MAX_SERVER_MESSAGE = 200;

interface Token {
  readonly value: string;
  /** Local clock, epoch ms; undefined when the token does not say (then: renewed on 401 only). */
  readonly expiresAt: number | undefined;
  readonly renewAt: number | undefined;
}

export class InfisicalClient {
  readonly #opts: InfisicalClientOptions;
  readonly #now: () => number;
  #sdk: Promise<InfisicalSDK> | undefined;
  #token: Token | undefined;
  #auth: Promise<Token> | undefined;
  /** A call reached the server since the last network failure. */
  #reachable = false;

  constructor(opts: InfisicalClientOptions) {
    this.#opts = opts;
    this.#now = opts.now ?? Date.now;
  }

  /** Every secret of a folder, its imports included (the folder's own win). */
  async listFolder(path: string): Promise<Map<string, InfisicalValue>> {
    const { projectId, environment } = this.#opts;
    const secrets = await this.#call(`listing folder ${path}`, (sdk) =>
      sdk.secrets().listSecretsWithImports({
        projectId,
        environment,
        secretPath: path,
        expandSecretReferences: true,
        viewSecretValue: true,
        recursive: false,
      }),
    );
    const out = new Map<string, InfisicalValue>();
    for (const secret of secrets)
      if (!out.has(secret.secretKey)) out.set(secret.secretKey, secretValueOf(secret));
    return out;
  }

  /** One secret; undefined when Infisical has no such secret (HTTP 404). */
  async getSecret(path: string, name: string): Promise<InfisicalValue | undefined> {
    const { projectId, environment } = this.#opts;
    try {
      const secret = await this.#call(`reading ${joinPath(path, name)}`, (sdk) =>
        sdk.secrets().getSecret({
          projectId,
          environment,
          secretPath: path,
          secretName: name,
          includeImports: true,
          expandSecretReferences: true,
          viewSecretValue: true,
        }),
      );
      return secretValueOf(secret);
    } catch (err) {
      if (err instanceof InfisicalError && err.status === 404) return undefined;
      throw err;
    }
  }

  async #call<T>(what: string, call: (sdk: InfisicalSDK) => Promise<T>): Promise<T> {
    try {
      const result = await this.#authorizedCall(what, call);
      this.#reachable = true;
      return result;
    } catch (err) {
      if (err instanceof InfisicalError && err.status === undefined) this.#reachable = false;
      throw err;
    }
  }

  async #authorizedCall<T>(what: string, call: (sdk: InfisicalSDK) => Promise<T>): Promise<T> {
    // The SDK retries a network failure for up to ~65 s without saying why: while the server
    // is not known to answer, one plain connection first says it fast, with the cause.
    if (!this.#reachable && !behindProxy()) await this.#probe(what);
    const sdk = await this.#load();
    const token = await this.#validToken(sdk);
    try {
      return await call(sdk);
    } catch (err) {
      if (statusOf(err) !== 401) throw this.#describe(what, err);
    }
    // Revoked or expired early: log in again, once, and retry.
    await this.#relogin(sdk, token);
    try {
      return await call(sdk);
    } catch (err) {
      throw this.#describe(what, err);
    }
  }

  async #probe(what: string): Promise<void> {
    const { siteUrl, connectTimeoutMs } = this.#opts;
    try {
      await probe(siteUrl, connectTimeoutMs);
    } catch (err) {
      throw new InfisicalError(
        `cannot reach Infisical at ${siteUrl} while ${what} (${messageOf(err)}) — check sources.infisical.site_url and the network`,
        undefined,
      );
    }
  }

  #load(): Promise<InfisicalSDK> {
    // Loaded on first use: the SDK pulls in a large dependency tree that most setups never need.
    this.#sdk ??= loadInfisicalSdk(this.#opts.loadSdk).then(
      ({ InfisicalSDK }) => new InfisicalSDK({ siteUrl: this.#opts.siteUrl }),
      (err: unknown) => {
        this.#sdk = undefined; // installed meanwhile: the next call tries again
        throw err;
      },
    );
    return this.#sdk;
  }

  /** The current token, renewed (or replaced by a login) when most of its lifetime has passed. */
  async #validToken(sdk: InfisicalSDK): Promise<Token> {
    const token = this.#token;
    if (token !== undefined && (token.renewAt === undefined || this.#now() < token.renewAt)) return token;
    return this.#authenticate(sdk, token);
  }

  async #relogin(sdk: InfisicalSDK, used: Token): Promise<void> {
    if (this.#auth !== undefined) await this.#auth.catch(() => undefined);
    if (this.#token !== used) return; // someone else already got a new token
    await this.#authenticate(sdk, undefined);
  }

  /** One login or renewal at a time; `current` is renewed when it has not expired yet. */
  #authenticate(sdk: InfisicalSDK, current: Token | undefined): Promise<Token> {
    this.#auth ??= (async () => {
      if (current?.expiresAt !== undefined && this.#now() < current.expiresAt) {
        const renewed = await this.#renew(sdk, current).catch(() => undefined);
        if (renewed !== undefined) return renewed;
      }
      return this.#login(sdk);
    })().finally(() => {
      this.#auth = undefined;
    });
    return this.#auth;
  }

  async #login(sdk: InfisicalSDK): Promise<Token> {
    const { clientId, clientSecret } = await this.#opts.credentials();
    const now = this.#now();
    try {
      await sdk.auth().universalAuth.login({ clientId, clientSecret });
    } catch (err) {
      const status = statusOf(err);
      if (status !== undefined && status >= 400 && status < 500) {
        throw new InfisicalError(
          `Infisical refused the login (HTTP ${status}${serverMessage(err)}) — check the machine identity's client id and secret (sources.infisical.auth) and that universal auth is enabled for it`,
          status,
        );
      }
      throw this.#describe("the login", err);
    }
    return this.#accept(sdk, now);
  }

  /** A renewed token, or undefined when the renewal did not extend its life (then: log in). */
  async #renew(sdk: InfisicalSDK, current: Token): Promise<Token | undefined> {
    const now = this.#now();
    await sdk.auth().universalAuth.renew();
    const renewed = this.#accept(sdk, now);
    const extended =
      renewed.expiresAt !== undefined &&
      current.expiresAt !== undefined &&
      renewed.expiresAt > current.expiresAt;
    return extended ? renewed : undefined;
  }

  #accept(sdk: InfisicalSDK, now: number): Token {
    const value = sdk.auth().getAccessToken();
    if (value === null || value === "") {
      throw new InfisicalError("Infisical's login answered without an access token", undefined);
    }
    knownSecrets.add(value);
    this.#token = tokenOf(value, now);
    return this.#token;
  }

  #describe(what: string, err: unknown): InfisicalError {
    if (err instanceof InfisicalError) return err;
    const status = statusOf(err);
    const { siteUrl, projectId, environment } = this.#opts;
    if (status === undefined) {
      return new InfisicalError(
        `cannot reach Infisical at ${siteUrl} while ${what} (${messageOf(err)}) — check sources.infisical.site_url and the network`,
        undefined,
      );
    }
    const hint =
      status === 401 || status === 403
        ? ` — give the machine identity read access to project ${projectId}, environment ${environment}`
        : status === 404
          ? ` — check sources.infisical project_id (${projectId}), environment (${environment}) and path`
          : "";
    return new InfisicalError(
      `Infisical answered HTTP ${status}${serverMessage(err)} while ${what}${hint}`,
      status,
    );
  }
}

function secretValueOf(secret: SdkSecret): InfisicalValue {
  return {
    value: typeof secret.secretValue === "string" ? secret.secretValue : "",
    hidden: secret.secretValueHidden === true,
  };
}

export function joinPath(folder: string, name: string): string {
  return folder.endsWith("/") ? `${folder}${name}` : `${folder}/${name}`;
}

/** The HTTP status in an SDK error (its message is the only place the SDK keeps it). */
function statusOf(err: unknown): number | undefined {
  const match = /\[StatusCode=(\d{3})\]|Request failed with status (\d{3})/.exec(messageOf(err));
  return match === null ? undefined : Number(match[1] ?? match[2]);
}

/** `: <the server's message>`, shortened, when the SDK error carries one. */
function serverMessage(err: unknown): string {
  const match = /\[StatusCode=\d{3}\] (.+)$/s.exec(messageOf(err));
  if (match?.[1] === undefined) return "";
  const text = match[1].replace(/\s+/g, " ").trim();
  return text === ""
    ? ""
    : `: ${text.length > MAX_SERVER_MESSAGE ? `${text.slice(0, MAX_SERVER_MESSAGE)}…` : text}`;
}

/**
 * When to renew, from the token's own claims (Infisical's access tokens are JWTs with `iat` and
 * `exp`). The lifetime is measured from `now` so that a skewed server clock does not matter.
 */
function tokenOf(value: string, now: number): Token {
  const claims = jwtClaims(value);
  const exp = typeof claims?.exp === "number" ? claims.exp * 1000 : undefined;
  if (exp === undefined) return { value, expiresAt: undefined, renewAt: undefined };
  const iat = typeof claims?.iat === "number" ? claims.iat * 1000 : undefined;
  const lifetime = Math.max(0, iat === undefined ? exp - now : exp - iat);
  return { value, expiresAt: now + lifetime, renewAt: now + lifetime * RENEW_AT };
}

function jwtClaims(token: string): Record<string, unknown> | undefined {
  const payload = token.split(".")[1];
  if (payload === undefined) return undefined;
  try {
    const parsed: unknown = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
    return parsed !== null && typeof parsed === "object" ? (parsed as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** Proxy variables may route the SDK's fetch where a direct connection cannot go. */
function behindProxy(): boolean {
  return ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"].some(
    (name) => (process.env[name] ?? process.env[name.toLowerCase()] ?? "") !== "",
  );
}

/** Opens one connection (with the TLS handshake for https) to the site and closes it. */
function probe(siteUrl: string, timeoutMs: number): Promise<void> {
  const url = new URL(siteUrl);
  const https = url.protocol === "https:";
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  const port = Number(url.port || (https ? 443 : 80));
  return new Promise((resolve, reject) => {
    const socket: Socket = https
      ? tlsConnect({
          host,
          port,
          ...(isIP(host) === 0 ? { servername: host } : {}),
          ALPNProtocols: ["http/1.1"],
        })
      : netConnect({ host, port });
    const done = (err?: Error) => {
      clearTimeout(timer);
      socket.destroy();
      if (err === undefined) resolve();
      else reject(err);
    };
    const timer = setTimeout(() => done(new Error(`no connection within ${seconds(timeoutMs)}`)), timeoutMs);
    socket.once(https ? "secureConnect" : "connect", () => done());
    socket.once("error", (err: NodeJS.ErrnoException) => done(new Error(err.code ?? err.message)));
  });
}
