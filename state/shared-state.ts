// The state brokers may share (docs/spec.md §17), one store per kind, each an interface beside its
// implementations (marks/, tokens/, mcp/, sessions/, approvals/). `SharedState` is the set a
// broker uses, chosen once from the rule file's `state:`: the home (home-state.ts: one broker,
// or several on one machine) or a fleet's Redis (redis/state.ts). The request path never calls
// a store: each broker keeps its own copy in memory (PoolState, OAuthLogins, the approvals'
// grants), which the stores keep current.
//
// This folder imports only core/ and certs/ (the trust roots for rediss://), so every other
// folder may use it (test/unit/architecture.test.ts).
import type { ApprovalStore } from "./approvals/store.js";
import type { MarkStore } from "./marks/store.js";
import type { McpStore } from "./mcp/store.js";
import type { RedisConfig } from "./redis/config.js";
import type { SessionStore } from "./sessions/store.js";
import type { StoredLogin } from "./tokens/login.js";
import type { TokenStore } from "./tokens/store.js";

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

/** The stores of one broker. `attachPools` is its mark store's (`marks`). */
export interface SharedState extends MarkStore {
  readonly marks: MarkStore;
  /** OAuth logins and their refresh lock. */
  readonly tokens: TokenStore;
  /** MCP logins' bindings and client registrations: read by `auth` commands and at refresh only. */
  readonly mcp: McpStore;
  /** Admin page sessions. */
  readonly sessions: SessionStore;
  /** Held requests and `--for` grants (docs/spec.md §16). */
  readonly approvals: ApprovalStore;
  /** The logins the broker holds, to publish again to a store that lost them. */
  attachLogins(held: () => readonly StoredLogin[]): void;
  health(): StateHealth;
  /** Resolves once every change made so far has been sent to the store (or failed to be). */
  settled(): Promise<void>;
  close(): Promise<void>;
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

/** The rule file's `state:` (rules/types.ts `Rules`): the home, or a connection to the fleet's Redis. */
export async function openSharedState(
  rules: { readonly state?: RedisConfig | undefined },
  opts: SharedStateOptions,
): Promise<SharedState> {
  if (rules.state === undefined) {
    const { HomeState } = await import("./home-state.js");
    return new HomeState(opts.home);
  }
  const { RedisState } = await import("./redis/state.js");
  return RedisState.open(rules.state, opts);
}
