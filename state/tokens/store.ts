// Where OAuth logins live (docs/spec.md §8) and their refresh lock: the interface of the token stores.
// Implementations side by side: home.ts (`tokens/` in the home), memory.ts (one process),
// redis.ts (a fleet, docs/spec.md §17).
import type { StoredLogin } from "./login.js";

export interface TokenStore {
  /** Every login, or every login of one provider. */
  list(provider?: string): Promise<StoredLogin[]>;
  get(provider: string, id: string): Promise<StoredLogin | undefined>;
  /**
   * Writes a login. With `ifGeneration`, only when the stored login still has that generation
   * (the fencing check of a refresh: a stalled holder never overwrites a newer token). Returns
   * false when the check failed and nothing was written.
   */
  put(login: StoredLogin, ifGeneration?: number): Promise<boolean>;
  /** Deletes a login; false when there was none. */
  remove(provider: string, id: string): Promise<boolean>;
  /**
   * Runs `fn` holding the login's refresh lock, shared by every process using the store. A
   * lock whose holder died is taken over after `staleMs`; waiting gives up after `waitMs`.
   */
  withRefreshLock<T>(provider: string, id: string, opts: LockOptions, fn: () => Promise<T>): Promise<T>;
  /** Calls `onChange(provider, id)` when a login is added, replaced or removed by anyone. */
  watch(onChange: (provider: string, id: string) => void): () => void;
}

export interface LockOptions {
  /** A lock not renewed for this long belongs to a dead holder (at least 2 s). */
  readonly staleMs: number;
  /** The longest wait for the lock. */
  readonly waitMs: number;
}

/** The refresh lock was not had in time (`LockOptions.waitMs`). */
export class LockTimeoutError extends Error {
  override name = "LockTimeoutError";
}
