// The Prometheus side of the broker's metrics: a prom-client registry of the broker's own (not
// the global default), built on the first scrape, whose series read the counting cells of
// metrics/broker-metrics.ts when they are collected. The series are exactly docs/spec.md §18's; their
// labels are ids (provider, client, credential id, decision), never values.
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import {
  type BrokerMetrics,
  OVERHEAD_BOUNDS_MS,
  type TimingCell,
  UPSTREAM_BOUNDS_MS,
} from "./broker-metrics.js";
import { type Buckets, type LabelledCounts, STATUS_CLASSES } from "./counts.js";

/** A credential's state as `status` reports it (admin/status.ts `CredentialStatus`). */
export type CredentialStateLabel = "ok" | "usage_limit_reached" | "invalid" | "missing" | "reauth_required";

/** The states a credential is reported in, one 0/1 series each. */
const CREDENTIAL_STATES: readonly CredentialStateLabel[] = [
  "ok",
  "usage_limit_reached",
  "invalid",
  "missing",
  "reauth_required",
];

/** Each provider's credentials, as `status` reports them (read at scrape time). */
export type CredentialSource = () => Iterable<{
  readonly provider: string;
  readonly credentials: readonly { readonly id: string; readonly state: CredentialStateLabel }[];
}>;

type Labels = Record<string, string>;

const NOT_COUNTERS = new Set([
  "nodejs_active_handles_total",
  "nodejs_active_requests_total",
  "nodejs_active_resources_total",
]);

function labelsOf(names: readonly string[], values: readonly string[]): Labels {
  const labels: Labels = {};
  names.forEach((name, i) => {
    labels[name] = values[i]!;
  });
  return labels;
}

/** A counter that shows the cells of `counts` when scraped. */
function countsCounter(registry: Registry, name: string, help: string, counts: LabelledCounts): void {
  new Counter({
    name,
    help,
    labelNames: counts.labelNames,
    registers: [registry],
    collect() {
      this.reset();
      for (const [values, n] of counts.entries()) this.inc(labelsOf(counts.labelNames, values), n);
    },
  });
}

/** prom-client's histogram state for one label set (it has no call to set a whole histogram). */
interface HistogramValues {
  labels: Labels;
  bucketValues: Record<number, number>;
  sum: number;
  count: number;
}

/** A histogram by provider that shows the buckets kept in the timing cells when scraped. */
function cellHistogram(
  registry: Registry,
  name: string,
  help: string,
  metrics: BrokerMetrics,
  pick: (cell: TimingCell) => Buckets,
  boundsMs: readonly number[],
): void {
  new Histogram({
    name,
    help,
    labelNames: ["provider"],
    buckets: boundsMs.map((ms) => ms / 1000),
    registers: [registry],
    collect() {
      // Fills the state prom-client keeps per label set (`hashMap`, keyed by a label string of
      // its own), which it then prints as _bucket, _sum and _count lines. A prom-client that
      // keeps it otherwise fails test/integration/metrics.test.ts (bucket counts, promtool).
      const state: Record<string, HistogramValues> = {};
      for (const cell of metrics.timingCells()) {
        const b = pick(cell);
        const bucketValues: Record<number, number> = {};
        boundsMs.forEach((ms, i) => {
          bucketValues[ms / 1000] = b.counts[i]!;
        });
        state[`provider:${cell.provider}`] = {
          labels: { provider: cell.provider },
          bucketValues,
          sum: b.sumMs / 1000,
          count: b.count,
        };
      }
      (this as unknown as { hashMap: Record<string, HistogramValues> }).hashMap = state;
    },
  });
}

export function createRegistry(metrics: BrokerMetrics, credentials: CredentialSource): Registry {
  const registry = new Registry();
  // Process metrics: prom-client's defaults, less the three gauges it names *_total (sums of
  // nodejs_active_handles etc., which stay), which `promtool check metrics` rejects.
  collectDefaultMetrics({ register: registry });
  for (const name of NOT_COUNTERS) registry.removeSingleMetric(name);

  new Counter({
    name: "keybroker_requests_total",
    help: "Requests handled, by provider (empty: none matched), client, decision and status class",
    labelNames: ["provider", "client", "decision", "status"],
    registers: [registry],
    collect() {
      this.reset();
      for (const cell of metrics.trafficCells()) {
        for (const [decision, byClass] of cell.decisions) {
          STATUS_CLASSES.forEach((status, i) => {
            const n = byClass[i]!;
            if (n > 0) this.inc({ provider: cell.provider, client: cell.client, decision, status }, n);
          });
        }
      }
    },
  });
  const bytes = (name: string, help: string, read: (c: { bytesIn: number; bytesOut: number }) => number) =>
    new Counter({
      name,
      help,
      labelNames: ["provider", "client"],
      registers: [registry],
      collect() {
        this.reset();
        for (const cell of metrics.trafficCells())
          this.inc({ provider: cell.provider, client: cell.client }, read(cell));
      },
    });
  bytes(
    "keybroker_upstream_sent_bytes_total",
    "Request body bytes sent upstream (by content-length), by provider and client",
    (c) => c.bytesOut,
  );
  bytes(
    "keybroker_upstream_received_bytes_total",
    "Response body bytes received from upstream, by provider and client",
    (c) => c.bytesIn,
  );
  cellHistogram(
    registry,
    "keybroker_overhead_seconds",
    "Time a forwarded request spent in the broker: its whole time less its upstream time",
    metrics,
    (c) => c.overhead,
    OVERHEAD_BOUNDS_MS,
  );
  cellHistogram(
    registry,
    "keybroker_upstream_seconds",
    "Time from sending a request upstream to the end of the answer, over every attempt",
    metrics,
    (c) => c.upstream,
    UPSTREAM_BOUNDS_MS,
  );
  new Gauge({
    name: "keybroker_credential_state",
    help: "1 for the state each credential is in, 0 for the others, by provider and credential id",
    labelNames: ["provider", "credential", "state"],
    registers: [registry],
    collect() {
      this.reset();
      for (const p of credentials()) {
        for (const c of p.credentials) {
          for (const state of CREDENTIAL_STATES)
            this.set({ provider: p.provider, credential: c.id, state }, c.state === state ? 1 : 0);
        }
      }
    },
  });
  countsCounter(
    registry,
    "keybroker_marks_total",
    "Credentials marked after a quota or rejection answer (docs/spec.md §7)",
    metrics.marks,
  );
  countsCounter(
    registry,
    "keybroker_retries_total",
    "Requests sent again on another credential of the pool",
    metrics.retries,
  );
  countsCounter(
    registry,
    "keybroker_fallbacks_total",
    "Requests moved to a fallback provider, from the exhausted one to the one that took it",
    metrics.fallbacks,
  );
  countsCounter(
    registry,
    "keybroker_oauth_refreshes_total",
    "OAuth refreshes, by result: ok, failed (tried again later), rejected (the login needs a person)",
    metrics.refreshes,
  );
  countsCounter(
    registry,
    "keybroker_reauth_required_total",
    "OAuth logins marked reauth_required: someone must run keybroker auth add again",
    metrics.reauthRequired,
  );
  countsCounter(
    registry,
    "keybroker_exfiltration_blocked_total",
    "Requests blocked for sending a credential toward a host it is not for, by client and error code",
    metrics.exfiltrationBlocked,
  );
  new Gauge({
    name: "keybroker_approvals_pending",
    help: "Requests held for an approval now",
    registers: [registry],
    collect() {
      this.set(metrics.approvalsPending);
    },
  });
  new Gauge({
    name: "keybroker_launch_start_time_seconds",
    help: "Each run --isolate launch running now (its id, client and command), by when it started",
    labelNames: ["launch", "client", "command"],
    registers: [registry],
    collect() {
      this.reset();
      for (const l of metrics.launches()) {
        this.set({ launch: l.id, client: l.client, command: l.command }, Date.parse(l.startedAt) / 1000);
      }
    },
  });
  countsCounter(
    registry,
    "keybroker_approvals_answered_total",
    "Held requests answered: approved, denied, approval_timeout or withdrawn",
    metrics.approvalsAnswered,
  );
  new Counter({
    name: "keybroker_approvals_full_total",
    help: "Requests an approve rule matched, refused with approvals_full: approvals.max_pending or max_bytes were reached",
    registers: [registry],
    collect() {
      this.reset();
      this.inc(metrics.approvalsFull);
    },
  });
  return registry;
}
