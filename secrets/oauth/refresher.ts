// Refresh custody (docs/spec.md §8): the broker is the only party that refreshes a login. Ahead of
// expiry on a timer (off the request path), and on demand when a token has expired or the
// upstream refused it. Single-flight in the process; under the store's lock across processes;
// after taking the lock the store is read again and a token another process refreshed is
// adopted; the intent to send a refresh token is stored before it is sent (a crash leaves at
// most one more try), and the answer is stored, fenced on the generation it started from,
// before the new access token is used. A permanent failure marks the login reauth_required
// (its tokens kept); a transient one keeps a still-valid token. A `client_credentials`
// provider has no login: its token is fetched from client_id and client_secret when first
// needed, again ahead of expiry and after a 401, and held in memory only (docs/spec.md §8).

import { kindOf } from "../../rules/kinds/index.js";
import type { ProviderRule } from "../../rules/types.js";
import type { StoredLogin } from "../../state/tokens/login.js";
import { OAuthEndpointError } from "./capped-fetch.js";
import type { LoginEntry, OAuthLogins } from "./logins.js";
import { type OAuthClient, OAuthServerError } from "./oauth-client.js";

const PERMANENT = new Set(["invalid_grant", "invalid_client", "unauthorized_client", "http_400", "http_401"]);

/** The credential id of a client_credentials provider's token in its pool. */
export const CLIENT_CREDENTIALS_ID = "client_credentials";

/** When to refresh: 10 % of the lifetime or 60 s before expiry, whichever is more (at most half). */
export function refreshAt(
  login: StoredLogin,
  renewable = login.refreshToken !== undefined,
): number | undefined {
  if (login.expiresAt === undefined || !renewable) return undefined;
  const lifetime = Math.max(0, login.expiresAt - login.issuedAt);
  const ahead = Math.min(Math.max(lifetime * 0.1, 60_000), lifetime / 2);
  return login.expiresAt - ahead;
}

export function isExpired(login: StoredLogin, now = Date.now()): boolean {
  return login.expiresAt !== undefined && login.expiresAt <= now;
}

/** A failed client_credentials fetch is answered from memory this long before trying again. */
const CLIENT_RETRY_MS = 2_000;

export class RefreshFailed extends Error {
  override name = "RefreshFailed";
  readonly permanent: boolean;
  constructor(message: string, permanent: boolean) {
    super(message);
    this.permanent = permanent;
  }
}

export interface RefresherOptions {
  readonly logins: OAuthLogins;
  /** The OAuth client of a provider, or undefined when it has no oauth block any more. */
  readonly client: (provider: string) => OAuthClient | undefined;
  /**
   * The client of one login where it depends on the login (an MCP server's, read from the
   * login's binding); undefined for the others, which use `client`.
   */
  readonly loginClient?: (provider: string, id: string) => Promise<OAuthClient | undefined> | undefined;
  readonly rule: (provider: string) => ProviderRule | undefined;
  readonly onEvent: (decision: "refreshed" | "reauth_required", login: StoredLogin, detail?: string) => void;
  /** Each refresh token sent, by result: ok, failed (tried again later), rejected (permanently). */
  readonly onRefresh?: (provider: string, result: "ok" | "failed" | "rejected") => void;
  readonly warn: (message: string) => void;
}

export class Refresher {
  readonly #opts: RefresherOptions;
  readonly #inflight = new Map<string, Promise<LoginEntry | undefined>>();
  readonly #timers = new Map<string, NodeJS.Timeout>();
  readonly #clientFailures = new Map<string, { at: number; error: RefreshFailed }>();
  /** MCP logins already reported as having no binding to refresh with. */
  readonly #unbound = new Set<string>();
  #closed = false;

  constructor(opts: RefresherOptions) {
    this.#opts = opts;
  }

  /** (Re)schedules the refresh ahead of expiry of a login the broker holds. */
  schedule(login: StoredLogin): void {
    const key = `${login.provider}\0${login.id}`;
    clearTimeout(this.#timers.get(key));
    this.#timers.delete(key);
    const at = refreshAt(login, login.refreshToken !== undefined || this.#isClientGrant(login.provider));
    if (this.#closed || at === undefined || login.state !== "ok") return;
    const timer = setTimeout(
      () => {
        this.#timers.delete(key);
        this.refresh(login.provider, login.id, login.accessToken).catch(() => {});
      },
      Math.max(0, Math.min(at - Date.now(), 2 ** 31 - 1)),
    );
    timer.unref();
    this.#timers.set(key, timer);
  }

  #isClientGrant(provider: string): boolean {
    return this.#opts.client(provider)?.spec.grant === "client_credentials";
  }

  unschedule(provider: string, id: string): void {
    const key = `${provider}\0${id}`;
    clearTimeout(this.#timers.get(key));
    this.#timers.delete(key);
  }

  close(): void {
    this.#closed = true;
    for (const t of this.#timers.values()) clearTimeout(t);
    this.#timers.clear();
  }

  /**
   * A fresh token for the login: single-flight per login. `stale` is the access token the
   * caller found expired or refused; a token other than it in the store is adopted as is.
   */
  refresh(provider: string, id: string, stale: string): Promise<LoginEntry | undefined> {
    const key = `${provider}\0${id}`;
    let pending = this.#inflight.get(key);
    if (pending === undefined) {
      const work = this.#isClientGrant(provider)
        ? this.#fetchClientToken(provider)
        : this.#refresh(provider, id, stale);
      pending = work.finally(() => this.#inflight.delete(key));
      this.#inflight.set(key, pending);
    }
    return pending;
  }

  async #refresh(provider: string, id: string, stale: string): Promise<LoginEntry | undefined> {
    const { logins } = this.#opts;
    const client = (await this.#opts.loginClient?.(provider, id)) ?? this.#opts.client(provider);
    if (client === undefined) {
      // An MCP login is refreshed with what it was made with (its binding); without that it
      // cannot be, and the person who can fix it is told once, not at each request.
      const key = `${provider}\0${id}`;
      const rule = this.#opts.rule(provider);
      if (rule !== undefined && kindOf(rule).boundLogins && !this.#unbound.has(key)) {
        this.#unbound.add(key);
        this.#opts.warn(
          `the MCP login ${provider}/${id} cannot be refreshed: how it was made (its authorization server and client) is not in the state store; run keybroker auth add ${provider}${id === "default" ? "" : ` --label ${id}`}`,
        );
      }
      return logins.get(provider, id);
    }
    const store = logins.store;
    const timeout = client.spec.tokenTimeoutMs;
    return store.withRefreshLock(
      provider,
      id,
      { staleMs: timeout + 5_000, waitMs: 2 * timeout + 10_000 },
      async () => {
        const current = await store.get(provider, id);
        if (current === undefined) return undefined;
        // Another process refreshed (or a new login replaced it) meanwhile: use that.
        if (current.state !== "ok" || (current.accessToken !== stale && !isExpired(current))) {
          return logins.adopt(current);
        }
        if (current.refreshToken === undefined) {
          return this.#giveUp(current, "no refresh token");
        }
        // A refresh token sent before without its answer stored (a crash) is tried once more at most.
        if ((current.refreshAttempts ?? 0) >= 2) return this.#giveUp(current, "refresh_unconfirmed");
        const sending: StoredLogin = {
          ...current,
          refreshSentAt: Date.now(),
          refreshAttempts: (current.refreshAttempts ?? 0) + 1,
          generation: current.generation + 1,
        };
        if (!(await store.put(sending, current.generation)))
          return logins.adopt((await store.get(provider, id)) ?? current);
        let tokens: Awaited<ReturnType<OAuthClient["refresh"]>>;
        try {
          tokens = await client.refresh(current.refreshToken);
        } catch (err) {
          if (err instanceof OAuthServerError && PERMANENT.has(err.error)) {
            this.#opts.onRefresh?.(provider, "rejected");
            return this.#giveUp(sending, err.error);
          }
          this.#opts.onRefresh?.(provider, "failed");
          const reason =
            err instanceof OAuthEndpointError || err instanceof OAuthServerError ? err.message : String(err);
          this.#opts.warn(`refreshing the login ${provider}/${id} failed, will try again: ${reason}`);
          // A refresh that never reached the server does not count as a send.
          if (err instanceof OAuthEndpointError && err.message.startsWith("cannot reach")) {
            await store.put({ ...current, generation: sending.generation + 1 }, sending.generation);
          }
          throw new RefreshFailed(reason, false);
        }
        this.#opts.onRefresh?.(provider, "ok");
        const now = Date.now();
        const next: StoredLogin = {
          provider,
          id,
          accessToken: tokens.accessToken,
          // An answer without a new refresh token (or scope) keeps the old one.
          refreshToken: tokens.refreshToken ?? current.refreshToken,
          ...((tokens.idToken ?? current.idToken) === undefined
            ? {}
            : { idToken: tokens.idToken ?? current.idToken }),
          ...(current.account === undefined ? {} : { account: current.account }),
          // A refresh answer may name the API anew (Qwen, Nous Portal); else the login's stays.
          ...((tokens.apiBase ?? current.apiBase) === undefined
            ? {}
            : { apiBase: tokens.apiBase ?? current.apiBase }),
          ...(tokens.expiresIn === undefined ? {} : { expiresAt: now + tokens.expiresIn * 1000 }),
          issuedAt: now,
          ...((tokens.scope ?? current.scope) === undefined ? {} : { scope: tokens.scope ?? current.scope }),
          createdAt: current.createdAt,
          refreshedAt: now,
          generation: sending.generation + 1,
          state: "ok",
        };
        // Stored (fsync) before the new access token is used; fenced against a newer write.
        if (!(await store.put(next, sending.generation))) {
          const newer = await store.get(provider, id);
          return newer === undefined ? undefined : logins.adopt(newer);
        }
        this.#opts.onEvent("refreshed", next);
        const entry = logins.adopt(next);
        this.schedule(next);
        return entry;
      },
    );
  }

  /**
   * The token of a client_credentials provider, fetched now: no login, no refresh token, no
   * lock (each broker may hold its own token). Kept in memory only. A failure is not cached
   * for long: the next request after a short pause tries again.
   */
  async #fetchClientToken(provider: string): Promise<LoginEntry | undefined> {
    const client = this.#opts.client(provider);
    if (client === undefined) return undefined;
    const key = `${provider}\0${CLIENT_CREDENTIALS_ID}`;
    const failed = this.#clientFailures.get(key);
    if (failed !== undefined && Date.now() - failed.at < CLIENT_RETRY_MS) throw failed.error;
    let tokens: Awaited<ReturnType<OAuthClient["clientCredentials"]>>;
    try {
      tokens = await client.clientCredentials();
    } catch (err) {
      const reason =
        err instanceof OAuthEndpointError || err instanceof OAuthServerError ? err.message : String(err);
      const permanent = err instanceof OAuthServerError && PERMANENT.has(err.error);
      const error = new RefreshFailed(
        `fetching the client_credentials token of ${provider} failed: ${reason}`,
        permanent,
      );
      this.#clientFailures.set(key, { at: Date.now(), error });
      this.#opts.warn(error.message);
      throw error;
    }
    this.#clientFailures.delete(key);
    const held = this.#opts.logins.get(provider, CLIENT_CREDENTIALS_ID)?.login;
    const now = Date.now();
    const next: StoredLogin = {
      provider,
      id: CLIENT_CREDENTIALS_ID,
      accessToken: tokens.accessToken,
      ...(tokens.expiresIn === undefined ? {} : { expiresAt: now + tokens.expiresIn * 1000 }),
      issuedAt: now,
      ...(tokens.scope === undefined ? {} : { scope: tokens.scope }),
      createdAt: held?.createdAt ?? now,
      refreshedAt: now,
      generation: (held?.generation ?? 0) + 1,
      state: "ok",
    };
    this.#opts.onEvent("refreshed", next);
    return this.#opts.logins.adopt(next, true);
  }

  async #giveUp(login: StoredLogin, reason: string): Promise<LoginEntry> {
    const { logins } = this.#opts;
    // The tokens are kept: a person logs in again, nothing is wiped.
    const marked: StoredLogin = {
      ...login,
      state: "reauth_required",
      reason,
      generation: login.generation + 1,
    };
    if (!(await logins.store.put(marked, login.generation))) {
      const newer = await logins.store.get(login.provider, login.id);
      return logins.adopt(newer ?? login);
    }
    this.#opts.onEvent("reauth_required", marked, reason);
    return logins.adopt(marked);
  }
}
