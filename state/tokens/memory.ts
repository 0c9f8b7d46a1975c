// OAuth logins in one process's memory: the TokenStore of brokers that share nothing on disk
// (an in-process test harness). The same calls as the home's and the fleet's store: `put` with
// `ifGeneration` is the fencing check, the refresh lock is one holder per login at a time.
import type { StoredLogin } from "./login.js";
import { type LockOptions, LockTimeoutError, type TokenStore } from "./store.js";

const keyOf = (provider: string, id: string) => JSON.stringify([provider, id]);

export class MemoryTokenStore implements TokenStore {
  readonly #logins = new Map<string, StoredLogin>();
  /** Each held lock: the promise that resolves when its holder lets go. */
  readonly #locks = new Map<string, Promise<void>>();
  readonly #watchers = new Set<(provider: string, id: string) => void>();

  async list(provider?: string): Promise<StoredLogin[]> {
    return [...this.#logins.values()]
      .filter((l) => provider === undefined || l.provider === provider)
      .sort((a, b) => (a.provider + a.id < b.provider + b.id ? -1 : 1));
  }

  async get(provider: string, id: string): Promise<StoredLogin | undefined> {
    return this.#logins.get(keyOf(provider, id));
  }

  async put(login: StoredLogin, ifGeneration?: number): Promise<boolean> {
    const key = keyOf(login.provider, login.id);
    if (ifGeneration !== undefined && this.#logins.get(key)?.generation !== ifGeneration) return false;
    this.#logins.set(key, login);
    this.#changed(login.provider, login.id);
    return true;
  }

  async remove(provider: string, id: string): Promise<boolean> {
    const removed = this.#logins.delete(keyOf(provider, id));
    if (removed) this.#changed(provider, id);
    return removed;
  }

  async withRefreshLock<T>(
    provider: string,
    id: string,
    opts: LockOptions,
    fn: () => Promise<T>,
  ): Promise<T> {
    const key = keyOf(provider, id);
    const deadline = Date.now() + opts.waitMs;
    for (let held = this.#locks.get(key); held !== undefined; held = this.#locks.get(key)) {
      const left = deadline - Date.now();
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        held.then(() => false),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(true), Math.max(0, left));
        }),
      ]);
      clearTimeout(timer);
      if (timedOut) {
        throw new LockTimeoutError(
          `the refresh lock of ${provider}/${id} is held by another holder (waited ${opts.waitMs} ms)`,
        );
      }
    }
    let release = () => {};
    this.#locks.set(
      key,
      new Promise<void>((resolve) => {
        release = resolve;
      }),
    );
    try {
      return await fn();
    } finally {
      this.#locks.delete(key);
      release();
    }
  }

  watch(onChange: (provider: string, id: string) => void): () => void {
    this.#watchers.add(onChange);
    return () => this.#watchers.delete(onChange);
  }

  #changed(provider: string, id: string): void {
    for (const w of this.#watchers) w(provider, id);
  }
}
