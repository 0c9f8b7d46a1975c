// The broker's in-memory view of the token store: what the request path reads (no disk, no
// lock, no network per request). Kept current by watching the store, so a login added,
// replaced or removed by `auth add`/`auth remove` or another broker is used at once.
import { knownSecrets } from "../../core/scrub.js";
import type { StoredLogin } from "../../state/tokens/login.js";
import type { TokenStore } from "../../state/tokens/store.js";
import { Secret } from "../secret.js";

export interface LoginEntry {
  readonly login: StoredLogin;
  /** The access token, as the pool's credential: its id is the login's id. */
  readonly secret: Secret;
}

export interface LoginsOptions {
  /** A login was replaced by a new one (a new `auth add`), not refreshed: its marks go. */
  readonly onReplaced?: (provider: string, id: string) => void;
  readonly warn?: (message: string) => void;
  /** The login held now changed (to schedule its refresh), or went away (undefined). */
  readonly onHeld?: (login: StoredLogin | undefined, provider: string, id: string) => void;
  /** A login appeared or went away after the broker started (for the audit log). */
  readonly onEvent?: (
    decision: "login" | "removed",
    provider: string,
    id: string,
    fingerprint?: string,
  ) => void;
}

export class OAuthLogins {
  readonly store: TokenStore;
  readonly #byProvider = new Map<string, Map<string, LoginEntry>>();
  #opts: LoginsOptions;
  readonly #pending = new Map<string, Promise<void>>();
  #unwatch: (() => void) | undefined;
  #opened = false;

  constructor(store: TokenStore, opts: LoginsOptions = {}) {
    this.store = store;
    this.#opts = opts;
  }

  /** Reads every login, then follows the store's changes. */
  async open(): Promise<this> {
    this.#unwatch = this.store.watch((provider, id) => {
      void this.reload(provider, id);
    });
    for (const login of await this.store.list()) this.adopt(login);
    this.#opened = true;
    return this;
  }

  /** Adds callbacks after construction (the refresher needs the logins to exist first). */
  listen(more: LoginsOptions): void {
    this.#opts = { ...this.#opts, ...more };
  }

  close(): void {
    this.#unwatch?.();
    this.#unwatch = undefined;
  }

  /** The logins of a provider, in label order. Synchronous: the request path calls it. */
  members(provider: string): readonly LoginEntry[] {
    const map = this.#byProvider.get(provider);
    return map === undefined ? [] : [...map.values()];
  }

  /** Every login held, of every provider. */
  all(): StoredLogin[] {
    return [...this.#byProvider.values()].flatMap((map) => [...map.values()].map((e) => e.login));
  }

  get(provider: string, id: string): LoginEntry | undefined {
    return this.#byProvider.get(provider)?.get(id);
  }

  /** Re-reads one login from the store (after a change notice). Serialized per login. */
  reload(provider: string, id: string): Promise<void> {
    const key = `${provider}\0${id}`;
    const previous = this.#pending.get(key) ?? Promise.resolve();
    const next = previous
      .then(async () => {
        const login = await this.store.get(provider, id);
        if (login === undefined) this.#forget(provider, id);
        else this.adopt(login);
      })
      .catch((err: Error) => this.#opts.warn?.(`cannot read the login ${provider}/${id}: ${err.message}`))
      .finally(() => {
        if (this.#pending.get(key) === next) this.#pending.delete(key);
      });
    this.#pending.set(key, next);
    return next;
  }

  /**
   * Uses `login` from now on, unless the one held is newer. `machine`: a token the broker got
   * without a person (client_credentials), which is no `login` event for the audit log.
   */
  adopt(login: StoredLogin, machine = false): LoginEntry {
    let map = this.#byProvider.get(login.provider);
    if (map === undefined) {
      map = new Map();
      this.#byProvider.set(login.provider, map);
    }
    const held = map.get(login.id);
    if (
      held !== undefined &&
      held.login.createdAt === login.createdAt &&
      held.login.generation >= login.generation
    ) {
      return held;
    }
    knownSecrets.add(login.accessToken);
    if (login.refreshToken !== undefined) knownSecrets.add(login.refreshToken);
    if (login.idToken !== undefined) knownSecrets.add(login.idToken);
    const entry: LoginEntry = {
      login,
      secret:
        held?.login.accessToken === login.accessToken
          ? held.secret
          : new Secret(login.accessToken, login.id, "oauth"),
    };
    map.set(login.id, entry);
    // A login new to the broker goes in its place by label: logins added while the broker runs
    // are read back in whatever order their reads finish, and fill_first takes the first.
    if (held === undefined && map.size > 1) {
      this.#byProvider.set(login.provider, new Map([...map].sort(([a], [b]) => (a < b ? -1 : 1))));
    }
    this.#opts.onHeld?.(login, login.provider, login.id);
    if (held !== undefined && held.login.createdAt !== login.createdAt) {
      this.#opts.onReplaced?.(login.provider, login.id);
    }
    if (this.#opened && !machine && held?.login.createdAt !== login.createdAt) {
      this.#opts.onEvent?.("login", login.provider, login.id, entry.secret.fingerprint);
    }
    return entry;
  }

  #forget(provider: string, id: string): void {
    const map = this.#byProvider.get(provider);
    if (map?.delete(id) === true) {
      this.#opts.onHeld?.(undefined, provider, id);
      this.#opts.onReplaced?.(provider, id);
      this.#opts.onEvent?.("removed", provider, id);
    }
  }
}
