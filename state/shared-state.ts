// The state brokers may share (SPEC §17): pool marks, OAuth logins with their refresh lock, and
// MCP logins' bindings and client registrations.
// One small interface, two places: the home folder (one broker, or several on one machine:
// `state/pools.json` and `tokens/`), or a fleet's Redis. The request path never calls it: each
// broker keeps its own copy in memory (PoolState, OAuthLogins), which this layer keeps current.
// Admin sessions and pending approvals are further small stores on the same client (absent: in
// the broker's memory).
import type { SessionStore } from "../admin/sessions.js";
import type { ApprovalStore } from "../proxy/approvals.js";
import type { Rules } from "../rules/types.js";
import type { PoolState } from "../secrets/pool.js";
import type { MarkStore } from "./marks/merge.js";
import { HomeMcpStore, type McpStore } from "./mcp/home.js";
import { FileTokenStore, type TokenStore } from "./tokens/home.js";
import type { StoredLogin } from "./tokens/login.js";

/** What `status` says about the shared state. */
export interface StateHealth {
  readonly store: "home" | "redis";
  /** The Redis URL (never a password) and key prefix. */
  readonly url?: string;
  readonly prefix?: string;
  /** Set while the store is unreachable or too slow: the broker serves from memory. */
  readonly degradedSince?: string;
  readonly error?: string;
}

export interface SharedState extends MarkStore {
  readonly tokens: TokenStore;
  /** MCP logins' bindings and client registrations: read by `auth` commands and at refresh only. */
  readonly mcp: McpStore;
  /** Where admin page sessions live when brokers share them; undefined: this broker's memory. */
  readonly sessions?: SessionStore;
  /** Where held requests wait (SPEC §16); unset: this broker's memory. */
  readonly approvals?: ApprovalStore;
  /** The logins the broker holds, to publish again to a store that lost them. */
  attachLogins(held: () => readonly StoredLogin[]): void;
  health(): StateHealth;
  /** Resolves once every change made so far has been sent to the store (or failed to be). */
  settled(): Promise<void>;
  close(): Promise<void>;
}

/** Today's behaviour: the home is the shared state of the brokers on one machine. */
export class HomeState implements SharedState {
  readonly tokens: TokenStore;
  readonly mcp: McpStore;
  #unfollow: (() => void) | undefined;

  constructor(home: string) {
    this.tokens = new FileTokenStore(home);
    this.mcp = new HomeMcpStore(home);
  }

  /**
   * PoolState writes state/pools.json itself, merging what others wrote (pool-file.ts); here it
   * also follows their writes, so it sees their marks without making one (decision 112).
   */
  attachPools(pools: PoolState): void {
    this.#unfollow?.();
    this.#unfollow = pools.followHome();
  }

  attachLogins(): void {
    // The token files are the logins.
  }

  health(): StateHealth {
    return { store: "home" };
  }

  async settled(): Promise<void> {}

  async close(): Promise<void> {
    this.#unfollow?.();
  }
}

export interface SharedStateOptions {
  readonly home: string;
  /** The home key (read, or made, only for a fleet store: tokens are sealed with it). */
  readonly homeKey: () => Buffer;
  /** Resolves a credential reference (the Redis password); undefined when it has no value. */
  readonly resolve: (ref: string) => Promise<string | undefined>;
  readonly log: {
    warn(message: string): void;
    info(message: string): void;
  };
}

/** The rule file's `state:`: the home, or a connection to the fleet's Redis. */
export async function openSharedState(rules: Rules, opts: SharedStateOptions): Promise<SharedState> {
  if (rules.state === undefined) return new HomeState(opts.home);
  const { RedisState } = await import("./redis/state.js");
  return RedisState.open(rules.state, opts);
}
