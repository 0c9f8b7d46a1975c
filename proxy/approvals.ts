// Requests held by `approve` rules until a person answers (SPEC §16): the registry of pending
// approvals, what the admin API, the CLI and the admin page read and answer. Its state sits
// behind ApprovalStore so that a fleet can keep it on Redis (SPEC §17): any broker may answer a
// request another broker holds; the holder learns the answer from the store.
import { createHash, randomBytes } from "node:crypto";
import type { PolicyRule } from "../rules/types.js";
import { ApprovalRoom } from "./approval-room.js";

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

/** A grant still in force in `grants` (until, epoch ms); one that ran out is dropped. */
export function grantIn(grants: Map<string, number>, key: string, now: number): number | undefined {
  const until = grants.get(key);
  if (until === undefined) return undefined;
  if (until > now) return until;
  grants.delete(key);
  return undefined;
}

/** One broker's store: everything in memory (pending requests end with the process anyway). */
export class MemoryApprovalStore implements ApprovalStore {
  readonly #pending = new Map<string, HeldRequest>();
  readonly #grants = new Map<string, number>();
  readonly #listeners: ((answer: Answer) => void)[] = [];

  async add(held: HeldRequest): Promise<void> {
    this.#pending.set(held.id, held);
  }

  async list(): Promise<HeldRequest[]> {
    return [...this.#pending.values()];
  }

  async take(id: string): Promise<HeldRequest | undefined> {
    const held = this.#pending.get(id);
    this.#pending.delete(id);
    return held;
  }

  async grant(key: string, until: number): Promise<void> {
    this.#grants.set(key, Math.max(until, this.#grants.get(key) ?? 0));
  }

  async grantedUntil(key: string, now: number): Promise<number | undefined> {
    return grantIn(this.#grants, key, now);
  }

  async publish(answer: Answer): Promise<void> {
    for (const listener of this.#listeners) listener(answer);
  }

  subscribe(listener: (answer: Answer) => void): void {
    this.#listeners.push(listener);
  }
}

/** A step worth a log line and an audit line: held, or how it ended (also a `--for` pass). */
export interface ApprovalEvent {
  readonly decision: "held" | Outcome;
  readonly request: ApprovalRequest & { readonly id?: string };
  readonly by?: string;
  readonly until?: number;
  readonly timeoutMs?: number;
}

export type ApprovalChange = { readonly type: "held" | "answered"; readonly id: string };

export interface ApprovalsOptions {
  /** Each step, for the log, the audit log and `notify`. */
  readonly onEvent: (event: ApprovalEvent) => void;
  readonly store?: ApprovalStore;
}

const identities = new WeakMap<PolicyRule, string>();

/**
 * An approve rule's identity: a digest of what it matches (methods, paths, roles, clients), not
 * of its place in the list, so a grant never passes to the rule a reload put in that place.
 * Worked out once per rule object (the rules of one load).
 */
export function ruleIdentity(rule: PolicyRule): string {
  let id = identities.get(rule);
  if (id === undefined) {
    const sorted = (xs: readonly string[] | undefined) => (xs === undefined ? null : [...xs].sort());
    const what = [
      rule.action,
      sorted(rule.methods),
      [...rule.paths],
      sorted(rule.roles),
      sorted(rule.clients),
      // Only when set, so the ids of rules written before decision 103 stay the same.
      ...(rule.ignoreCase ? ["case: insensitive"] : []),
    ];
    id = createHash("sha256").update(JSON.stringify(what)).digest("hex").slice(0, 16);
    identities.set(rule, id);
  }
  return id;
}

/** The key of a `--for` grant: the same client, provider and approve rule. */
function grantKey(r: ApprovalRequest): string {
  return `${r.client}\0${r.provider}\0${r.rule}`;
}

export function viewOf(held: HeldRequest, now = Date.now()): ApprovalView {
  return {
    id: held.id,
    client: held.client,
    provider: held.provider,
    method: held.method,
    host: held.host,
    path: held.path,
    seconds_left: Math.max(0, Math.ceil((held.expiresAt - now) / 1000)),
    held_at: new Date(held.heldAt).toISOString(),
    expires_at: new Date(held.expiresAt).toISOString(),
    preview: held.preview,
  };
}

/** Ids a person types: 8 lower-case hex characters. */
function newId(): string {
  return randomBytes(4).toString("hex");
}

interface Waiter {
  resolve(answer: Answer): void;
  timer: NodeJS.Timeout;
}

export class Approvals {
  /** This broker's bound on what it holds (approvals.max_pending / max_bytes), whatever the store. */
  readonly room = new ApprovalRoom();
  readonly #store: ApprovalStore;
  readonly #onEvent: (event: ApprovalEvent) => void;
  /** The requests this broker holds, by id. */
  readonly #waiters = new Map<string, Waiter>();
  readonly #listeners = new Set<(change: ApprovalChange) => void>();

  constructor(opts: ApprovalsOptions) {
    this.#store = opts.store ?? new MemoryApprovalStore();
    this.#onEvent = opts.onEvent;
    this.#store.subscribe((answer) => this.#answered(answer));
    this.#store.watch?.((change) => this.#changed(change));
  }

  /** Follows the pending list as it changes (for live views); returns the unsubscribe. */
  onChange(listener: (change: ApprovalChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * True when an earlier `approve --for` still covers this client, provider and rule: the
   * request passes without being held (and that is audited).
   */
  async covered(request: ApprovalRequest): Promise<boolean> {
    const until = await this.#store.grantedUntil(grantKey(request), Date.now());
    if (until === undefined) return false;
    this.#onEvent({ decision: "approved", request, by: "an earlier approve --for", until });
    return true;
  }

  /**
   * Holds a request until it is answered, times out, or `gone` fires (the client hung up).
   * Resolves with how it ended; never rejects for those.
   */
  async hold(
    request: ApprovalRequest,
    preview: string,
    timeoutMs: number,
    gone: AbortSignal,
  ): Promise<Answer> {
    const now = Date.now();
    const held: HeldRequest = { ...request, id: newId(), heldAt: now, expiresAt: now + timeoutMs, preview };
    const answer = new Promise<Answer>((resolve) => {
      const timer = setTimeout(() => void this.#end(held.id, "approval_timeout"), timeoutMs);
      timer.unref();
      this.#waiters.set(held.id, { resolve, timer });
    });
    const withdraw = () => void this.#end(held.id, "withdrawn");
    gone.addEventListener("abort", withdraw, { once: true });
    await this.#store.add(held);
    this.#onEvent({ decision: "held", request: held, timeoutMs });
    this.#changed({ type: "held", id: held.id });
    if (gone.aborted) withdraw();
    try {
      return await answer;
    } finally {
      gone.removeEventListener("abort", withdraw);
    }
  }

  /** Every pending request, oldest first. */
  async list(now = Date.now()): Promise<ApprovalView[]> {
    const all = await this.#store.list();
    return all.sort((a, b) => a.heldAt - b.heldAt).map((h) => viewOf(h, now));
  }

  /** Lets a pending request through (and, with `forMs`, the same client/provider/rule for a while). */
  approve(id: string, by: string, forMs?: number): Promise<ApprovalView | undefined> {
    return this.#end(id, "approved", by, forMs);
  }

  deny(id: string, by: string): Promise<ApprovalView | undefined> {
    return this.#end(id, "denied", by);
  }

  /** Stops every timer (the broker is closing; its sockets close and withdraw the requests). */
  close(): void {
    for (const w of this.#waiters.values()) clearTimeout(w.timer);
  }

  async #end(id: string, outcome: Outcome, by?: string, forMs?: number): Promise<ApprovalView | undefined> {
    const held = await this.#store.take(id);
    if (held === undefined) return undefined;
    const now = Date.now();
    const until = forMs === undefined ? undefined : now + forMs;
    // In force at once in the store's memory; its write to a shared store is not waited for (a
    // stalled Redis must not hold up the answer), and is sent before the answer on one connection.
    if (until !== undefined) this.#store.grant(grantKey(held), until).catch(() => {});
    await this.#store.publish({
      held,
      outcome,
      ...(by === undefined ? {} : { by }),
      ...(until === undefined ? {} : { until }),
    });
    return viewOf(held, now);
  }

  /** An answer from the store: if this broker holds the request, it goes on or is refused. */
  #answered(answer: Answer): void {
    const waiter = this.#waiters.get(answer.held.id);
    if (waiter === undefined) {
      // Another broker's request, answered (in a fleet): only the views change here.
      this.#changed({ type: "answered", id: answer.held.id });
      return;
    }
    this.#waiters.delete(answer.held.id);
    clearTimeout(waiter.timer);
    this.#onEvent({
      decision: answer.outcome,
      request: answer.held,
      ...(answer.by === undefined ? {} : { by: answer.by }),
      ...(answer.until === undefined ? {} : { until: answer.until }),
    });
    this.#changed({ type: "answered", id: answer.held.id });
    waiter.resolve(answer);
  }

  #changed(change: ApprovalChange): void {
    for (const listener of this.#listeners) {
      try {
        listener(change);
      } catch {
        // A view's failure is its own; the request goes on.
      }
    }
  }
}
