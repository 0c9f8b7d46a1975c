// Pending approvals and `--for` grants as a store holds them (docs/spec.md §16): the records every view
// shows, and the interface of the stores. Implementations side by side: memory.ts (one broker,
// also the home's: pending requests end with the process anyway), redis.ts (a fleet: any
// broker answers a request another holds). Holding a request (its timer, its body, the answer
// it waits for) is proxy/approvals.ts's business.

/** What a held request is, as every view shows it. Never a header, never a secret. */
export interface ApprovalRequest {
  readonly client: string;
  readonly provider: string;
  readonly method: string;
  /** host, or host:port when the port is not the scheme's default. */
  readonly host: string;
  /** Path and query, injected query values removed. */
  readonly path: string;
  /**
   * The approve rule, by what it says (ruleIdentity): `--for` covers this rule only, wherever a
   * reload moves it in the provider's policy.
   */
  readonly rule: string;
}

export interface HeldRequest extends ApprovalRequest {
  readonly id: string;
  /** Epoch milliseconds. */
  readonly heldAt: number;
  readonly expiresAt: number;
  /** The body's first 2 KiB, scrubbed of known secrets and secret-shaped strings. */
  readonly preview: string;
}

export type Outcome = "approved" | "denied" | "approval_timeout" | "withdrawn";

export interface Answer {
  readonly held: HeldRequest;
  readonly outcome: Outcome;
  /** Who answered: `admin token`, `client <name>`. */
  readonly by?: string;
  /** approved with `--for`: the same client, provider and rule pass until then (epoch ms). */
  readonly until?: number;
}

/** What the admin API and `keybroker approvals --json` show of a pending request. */
export interface ApprovalView {
  readonly id: string;
  readonly client: string;
  readonly provider: string;
  readonly method: string;
  readonly host: string;
  readonly path: string;
  readonly seconds_left: number;
  readonly held_at: string;
  readonly expires_at: string;
  readonly preview: string;
}

/**
 * Where pending approvals and `--for` grants live. `take` is the one atomic step: of approve,
 * deny, the timeout and the client hanging up, exactly one gets the request; it then publishes
 * its answer, which reaches the broker holding the request through `subscribe`.
 */
export interface ApprovalStore {
  add(held: HeldRequest): Promise<void>;
  list(): Promise<HeldRequest[]>;
  take(id: string): Promise<HeldRequest | undefined>;
  grant(key: string, until: number): Promise<void>;
  grantedUntil(key: string, now: number): Promise<number | undefined>;
  publish(answer: Answer): Promise<void>;
  subscribe(listener: (answer: Answer) => void): void;
  /** A shared store: requests other brokers hold, as they are held (for every broker's live views). */
  watch?(listener: (change: ApprovalChange) => void): void;
}

/** A change to the pending list, for live views. */
export type ApprovalChange = { readonly type: "held" | "answered"; readonly id: string };
