// Requests held by `approve` rules until a person answers (docs/spec.md §16): the registry of pending
// approvals, what the admin API, the CLI and the admin page read and answer. Its state sits
// behind ApprovalStore (state/approvals/: memory, or a fleet's Redis, docs/spec.md §17): any broker may answer a
// request another broker holds; the holder learns the answer from the store.
import { createHash, randomBytes } from "node:crypto";
import type { PolicyRule } from "../rules/types.js";
import type {
  Answer,
  ApprovalChange,
  ApprovalRequest,
  ApprovalStore,
  ApprovalView,
  HeldRequest,
  Outcome,
} from "../state/approvals/store.js";
import { ApprovalRoom } from "./approval-room.js";

/** A step worth a log line and an audit line: held, or how it ended (also a `--for` pass). */
export interface ApprovalEvent {
  readonly decision: "held" | Outcome;
  readonly request: ApprovalRequest & { readonly id?: string };
  readonly by?: string;
  readonly until?: number;
  readonly timeoutMs?: number;
}

export interface ApprovalsOptions {
  /** Each step, for the log, the audit log and `notify`. */
  readonly onEvent: (event: ApprovalEvent) => void;
  /** Where pending requests and grants live: SharedState's `approvals`. */
  readonly store: ApprovalStore;
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
    this.#store = opts.store;
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
