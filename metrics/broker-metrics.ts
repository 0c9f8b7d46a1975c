// The broker's metrics (docs/spec.md §18): what happened, counted where it is known. Requests are
// counted once, when their outcome is recorded (next to the audit line); pool events, OAuth
// refreshes and approvals by whoever takes them. Nothing here is Prometheus yet: the cells are
// turned into series only when /metrics is scraped (metrics/registry.ts), so a broker nobody
// scrapes pays only for the increments.
import type { LaunchInfo } from "../core/launch-info.js";
import { Buckets, LabelledCounts, STATUS_CLASSES, statusClassIndex, type TrafficCell } from "./counts.js";

/** Upper bounds of the broker overhead histogram, ms (the bar is 0.3 ms, docs/spec.md §14). */
export const OVERHEAD_BOUNDS_MS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 1000];
/** Upper bounds of the upstream time histogram, ms (model calls take seconds to minutes). */
export const UPSTREAM_BOUNDS_MS = [
  5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000, 120_000, 300_000,
];

/** Refusals that are a credential sent where it does not belong (docs/spec.md §3.1, §3.2). */
const EXFILTRATION_CODES = new Set(["placeholder_host_mismatch", "host_mismatch"]);

export type RefreshResult = "ok" | "failed" | "rejected";
/** How a held request ended: the audit's decisions of the same names. */
export type ApprovalResult = "approved" | "denied" | "approval_timeout" | "withdrawn";

/** Broker overhead and upstream time of the requests to one provider. */
export interface TimingCell {
  readonly provider: string;
  readonly overhead: Buckets;
  readonly upstream: Buckets;
}

/** What a request's count reads of it (proxy/exchange.ts's `Exchange` is one). */
export interface MeteredRequest {
  readonly client: { readonly rule: { readonly name: string } };
  readonly provider: { readonly rule: { readonly id: string } } | undefined;
  /** performance.now() when the request arrived. */
  readonly startedAt: number;
  /** Time spent waiting on the upstream, and on a person's answer (ms). */
  readonly upstreamMs: number;
  readonly heldMs: number;
}

export class BrokerMetrics {
  /** client → provider → cell. */
  readonly #traffic = new Map<string, Map<string, TrafficCell>>();
  readonly #timing = new Map<string, TimingCell>();
  readonly marks = new LabelledCounts(["provider", "credential"]);
  readonly retries = new LabelledCounts(["provider"]);
  readonly fallbacks = new LabelledCounts(["from", "to"]);
  readonly refreshes = new LabelledCounts(["provider", "result"]);
  readonly reauthRequired = new LabelledCounts(["provider"]);
  readonly exfiltrationBlocked = new LabelledCounts(["client", "code"]);
  readonly approvalsAnswered = new LabelledCounts(["result"]);
  approvalsPending = 0;
  /** Requests refused with approvals_full: this broker held as many as approvals.max_* allow. */
  approvalsFull = 0;
  /** The `run --isolate` launches running now (set by the broker; decision 114). */
  launches: () => readonly LaunchInfo[] = () => [];

  /**
   * One request's outcome, called once per request where its audit line is written. A few Map
   * lookups on ids the rules hold and some additions: no string or object is built.
   */
  request(
    x: MeteredRequest,
    decision: string,
    status: number,
    code: string | undefined,
    bytes: { readonly bytesIn: number; readonly bytesOut: number } | undefined,
  ): void {
    const provider = x.provider?.rule.id ?? "";
    const client = x.client.rule.name;
    const cell = this.#cell(client, provider);
    this.#count(cell, decision, status);
    if (bytes !== undefined) {
      cell.bytesIn += bytes.bytesIn;
      cell.bytesOut += bytes.bytesOut;
    }
    if (code !== undefined && EXFILTRATION_CODES.has(code)) this.exfiltrationBlocked.add([client, code]);
    else if (code === "approvals_full") this.approvalsFull++;
    // Times only for requests that reached the upstream: a refusal has no upstream time, and
    // its overhead is not what the overhead histogram is for.
    if (x.upstreamMs > 0) {
      const timing = this.#timingOf(provider);
      timing.upstream.observe(x.upstreamMs);
      // The wait for a person's answer is not the broker's work either.
      timing.overhead.observe(Math.max(0, performance.now() - x.startedAt - x.upstreamMs - x.heldMs));
    }
  }

  /** A CONNECT to a host without a provider: tunnelled, refused or failed, counted as a request. */
  tunnel(client: string, decision: string, status: number): void {
    this.#count(this.#cell(client, ""), decision, status);
  }

  /** A pool event (docs/spec.md §7): a credential marked, a retry on another one, a fallback. */
  poolEvent(
    decision: "marked" | "retried" | "fallback",
    provider: string,
    credential: string,
    fallbackTo: string | undefined,
  ): void {
    if (decision === "marked") this.marks.add([provider, credential]);
    else if (decision === "retried") this.retries.add([provider]);
    else this.fallbacks.add([provider, fallbackTo ?? ""]);
  }

  /** An OAuth refresh sent (secrets/oauth/refresher.ts): ok, failed (will retry), rejected (permanent). */
  refreshed(provider: string, result: RefreshResult): void {
    this.refreshes.add([provider, result]);
  }

  /** An OAuth login was marked reauth_required: a person has to log in again. */
  loginNeedsReauth(provider: string): void {
    this.reauthRequired.add([provider]);
  }

  /** A request is held for approval (docs/spec.md §16); approvalAnswered is called once for each. */
  approvalHeld(): void {
    this.approvalsPending++;
  }

  /** A held request was approved, denied, timed out or withdrawn by its client. */
  approvalAnswered(result: ApprovalResult): void {
    this.approvalsPending = Math.max(0, this.approvalsPending - 1);
    this.approvalsAnswered.add([result]);
  }

  *trafficCells(): Generator<TrafficCell> {
    for (const byProvider of this.#traffic.values()) yield* byProvider.values();
  }

  timingCells(): IterableIterator<TimingCell> {
    return this.#timing.values();
  }

  #cell(client: string, provider: string): TrafficCell {
    let byProvider = this.#traffic.get(client);
    if (byProvider === undefined) {
      byProvider = new Map();
      this.#traffic.set(client, byProvider);
    }
    let cell = byProvider.get(provider);
    if (cell === undefined) {
      cell = { client, provider, decisions: new Map(), bytesIn: 0, bytesOut: 0 };
      byProvider.set(provider, cell);
    }
    return cell;
  }

  #count(cell: TrafficCell, decision: string, status: number): void {
    let byClass = cell.decisions.get(decision);
    if (byClass === undefined) {
      byClass = new Float64Array(STATUS_CLASSES.length);
      cell.decisions.set(decision, byClass);
    }
    byClass[statusClassIndex(status)]!++;
  }

  #timingOf(provider: string): TimingCell {
    let cell = this.#timing.get(provider);
    if (cell === undefined) {
      cell = {
        provider,
        overhead: new Buckets(OVERHEAD_BOUNDS_MS),
        upstream: new Buckets(UPSTREAM_BOUNDS_MS),
      };
      this.#timing.set(provider, cell);
    }
    return cell;
  }
}
