// A per-key memory cache in front of a source that is slow or can fail (Infisical, commands).
// An answer is reused for `ttl` and refreshed in the background when most of it has passed;
// one fetch per key is in flight at a time; a caller waits for a fetch at most `timeout` (the
// fetch itself may go on in the background). Once the source fails (an error, or no answer
// within `timeout`), its last value is served as stale for `grace`, then no longer: the caller
// gets an error (fail closed).
import { messageOf } from "./source.js";

export interface RefreshCacheOptions {
  readonly ttlMs: number;
  readonly graceMs: number;
  /** The longest a caller waits for a fetch. */
  readonly timeoutMs: number;
  readonly now?: () => number;
  /** Told once when a key starts being served stale because its source fails or is slow. */
  readonly onStale?: (key: string, why: string, until: number) => void;
  /** Told once when a stale value runs out of grace and is no longer served. */
  readonly onExpired?: (key: string, why: string) => void;
  /** Told when a key that was stale or expired is fetched again. */
  readonly onRecovered?: (key: string) => void;
}

export type CacheAnswer<T> =
  | {
      readonly kind: "value";
      readonly data: T;
      /** Until when this answer may be reused without asking again (epoch ms). */
      readonly expiresAt: number;
      /** Set when the data is past its TTL: why it could not be refreshed. */
      readonly stale?: string;
    }
  | { readonly kind: "error"; readonly message: string; readonly expiresAt: number };

export interface GetOptions<T> {
  /**
   * Whether a caller holding only `previous` (past its TTL) should wait for the refresh.
   * Default yes. A caller for whom the old data means "not here, ask the next source" has
   * nothing to gain from waiting.
   */
  readonly waitFor?: (previous: T) => boolean;
}

/** Refresh in the background once this share of the TTL has passed. */
const REFRESH_AHEAD = 0.75;
/** While a source fails, it is asked again at most this often. */
const MAX_RETRY_MS = 5_000;

interface Inflight {
  /** Settles (never rejects) when the fetch ends. */
  readonly promise: Promise<void>;
  /** Resolves when the fetch has taken `timeout` (real time, whatever the cache's clock says). */
  readonly deadline: Promise<void>;
  overdue: boolean;
}

interface Entry<T> {
  data?: { readonly value: T; readonly fetchedAt: number };
  failure?: { readonly message: string; readonly at: number };
  /** When the current run of failures began (cleared by a successful fetch). */
  failingSince?: number;
  inflight?: Inflight;
  state: "ok" | "stale" | "expired";
}

export function seconds(ms: number): string {
  return ms < 1000 ? `${ms} ms` : `${Math.round(ms / 100) / 10} s`;
}

export class RefreshCache<T> {
  readonly #fetch: (key: string) => Promise<T>;
  readonly #opts: RefreshCacheOptions;
  readonly #now: () => number;
  readonly #retryMs: number;
  readonly #entries = new Map<string, Entry<T>>();

  constructor(fetch: (key: string) => Promise<T>, opts: RefreshCacheOptions) {
    this.#fetch = fetch;
    this.#opts = opts;
    this.#now = opts.now ?? Date.now;
    this.#retryMs = Math.min(opts.ttlMs, MAX_RETRY_MS);
  }

  async get(key: string, opts: GetOptions<T> = {}): Promise<CacheAnswer<T>> {
    let entry = this.#entries.get(key);
    if (entry === undefined) {
      entry = { state: "ok" };
      this.#entries.set(key, entry);
    }
    const now = this.#now();
    const data = entry.data;
    if (data !== undefined && now < data.fetchedAt + this.#opts.ttlMs) {
      if (now >= data.fetchedAt + this.#opts.ttlMs * REFRESH_AHEAD) this.#refresh(key, entry, now);
      return this.#answer(key, entry);
    }
    this.#refresh(key, entry, now);
    const inflight = entry.inflight;
    const wait =
      inflight !== undefined &&
      !inflight.overdue &&
      // A source known to fail is not waited for: its retry runs in the background.
      entry.failure === undefined &&
      (data === undefined || (opts.waitFor?.(data.value) ?? true));
    if (wait) await Promise.race([inflight.promise, inflight.deadline]);
    return this.#answer(key, entry);
  }

  #refresh(key: string, entry: Entry<T>, now: number): void {
    if (entry.inflight !== undefined) return;
    if (entry.failure !== undefined && now < entry.failure.at + this.#retryMs) return;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        inflight.overdue = true;
        entry.failingSince ??= this.#now();
        resolve();
      }, this.#opts.timeoutMs);
    });
    const promise = (async () => this.#fetch(key))()
      .then(
        (value) => {
          // The value was current when the fetch started: its TTL counts from there.
          entry.data = { value, fetchedAt: now };
          entry.failure = undefined;
          entry.failingSince = undefined;
          if (entry.state !== "ok") this.#opts.onRecovered?.(key);
          entry.state = "ok";
        },
        (err: unknown) => {
          const at = this.#now();
          entry.failure = { message: messageOf(err), at };
          entry.failingSince ??= at;
        },
      )
      .finally(() => {
        clearTimeout(timer);
        entry.inflight = undefined;
      });
    const inflight: Inflight = { promise, deadline, overdue: false };
    entry.inflight = inflight;
  }

  #answer(key: string, entry: Entry<T>): CacheAnswer<T> {
    const now = this.#now();
    const { ttlMs, graceMs } = this.#opts;
    const data = entry.data;
    const retryAt = now + this.#retryMs;
    if (data !== undefined && now < data.fetchedAt + ttlMs) {
      const refreshAt = data.fetchedAt + ttlMs * REFRESH_AHEAD;
      return {
        kind: "value",
        data: data.value,
        expiresAt: now < refreshAt ? refreshAt : data.fetchedAt + ttlMs,
      };
    }
    const failing = entry.failure !== undefined || entry.inflight?.overdue === true;
    const why =
      entry.failure?.message ??
      (entry.inflight === undefined
        ? "no answer yet"
        : entry.inflight.overdue
          ? `no answer within ${seconds(this.#opts.timeoutMs)} (still trying)`
          : "refreshing");
    if (data === undefined) return { kind: "error", message: why, expiresAt: retryAt };
    // A caller that chose not to wait for a refresh still running in time gets the old data.
    if (!failing) return { kind: "value", data: data.value, stale: why, expiresAt: retryAt };
    const since = entry.failingSince ?? now;
    const staleUntil = since + graceMs;
    if (now < staleUntil) {
      if (entry.state === "ok") {
        entry.state = "stale";
        this.#opts.onStale?.(key, why, staleUntil);
      }
      return { kind: "value", data: data.value, stale: why, expiresAt: Math.min(retryAt, staleUntil) };
    }
    if (entry.state !== "expired") {
      entry.state = "expired";
      this.#opts.onExpired?.(key, why);
    }
    return {
      kind: "error",
      message: `${why}; failing for ${seconds(now - since)}, longer than the grace period: the last value is no longer used`,
      expiresAt: retryAt,
    };
  }
}
