// Pool marks as the stores see them (docs/spec.md §7, §17, decision 112): what a broker's in-memory pool
// offers a store, and the interface every mark store implements. Implementations side by side:
// home.ts (`state/pools.json`, the brokers and commands on one machine), memory.ts (brokers in
// one process), redis.ts (a fleet). All of them combine two marks with `mergeMark` (merge.ts)
// only, so "marks only ever extend" is one function wherever a mark meets another.
import type { SharedMark } from "./merge.js";

export type CredentialStateName = "ok" | "usage_limit_reached" | "invalid";

/** One credential's state as a broker keeps it, and as pools.json holds it. */
export interface CredentialState {
  state: CredentialStateName;
  /** Epoch ms when a `usage_limit_reached` mark ends. */
  until?: number;
  /** Why it was marked (status code and error type; never a value). */
  reason?: string;
  /** For `invalid`: the fingerprint of the value that was refused. */
  fingerprint?: string;
  requests: number;
  marks: number;
  lastUsed?: number;
  /** When the mark in force was made or last extended (epoch ms): a reset made later clears it. */
  markedAt?: number;
}

/** What pools.json holds: each credential's state, and when marks were last cleared. */
export interface PoolData {
  readonly providers: Record<string, Record<string, CredentialState>>;
  /** provider → credential id (or `*`: all of them) → when its marks were cleared (epoch ms). */
  readonly resets: Record<string, Record<string, number>>;
}

/** Where marks made here go (a store that passes them on); called after the local change. */
export interface MarkMirror {
  mark(provider: string, id: string, mark: SharedMark): void;
  /** `at`: when the reset was made (epoch ms), which the store passes on (decision 137). */
  reset(provider: string, id: string | undefined, at: number): void;
}

/** A broker's marks in memory (secrets/pool.ts `PoolState`), as a store feeds and reads them. */
export interface MarkHolder {
  /** Sends every mark and reset made here from now on to `mirror` as well. */
  mirrorTo(mirror: MarkMirror): void;
  /** The marks in force now (to publish again). */
  marks(now?: number): { provider: string; id: string; mark: SharedMark }[];
  /** Takes in a mark made elsewhere, by the one rule; not sent back to the mirror. */
  merge(provider: string, id: string, mark: SharedMark, now?: number): void;
  /**
   * Takes in a reset made elsewhere (one credential, or all of a provider's) at `at` (now when
   * not known): marks made before it are cleared, later ones kept.
   */
  mergeReset(provider: string, id: string | undefined, at?: number): void;
  /** When the credential's marks were last cleared (its own reset or its provider's), if known. */
  resetAt(provider: string, id: string): number | undefined;
  /** Takes in what another process wrote to the home's pools.json (its resets and marks). */
  absorb(data: PoolData): void;
}

/** Where a broker's marks meet those of the other brokers sharing its state. */
export interface MarkStore {
  /** Joins the broker's pool marks to the store: marks made here go out, others come in. */
  attachPools(pools: MarkHolder): void;
}
