#!/usr/bin/env node
// The per-request cost of counting a request for /metrics: `BrokerMetrics.request()` (built
// dist/), the one call the broker makes per request, in ns per call. For comparison, what the same
// counting costs with prom-client's labelled children (a counter child inc and two histogram
// child observes), which build a label string on every call.
//
//   npm run build && node bench/metrics-call.mjs [--n 2000000] [--rounds 5]
import { parseArgs } from "node:util";
import { Counter, Histogram, Registry } from "prom-client";
import { BrokerMetrics, OVERHEAD_BOUNDS_MS, UPSTREAM_BOUNDS_MS } from "../dist/metrics/broker-metrics.js";

const { values: args } = parseArgs({
  options: { n: { type: "string", default: "2000000" }, rounds: { type: "string", default: "5" } },
});
const N = Number(args.n);
const ROUNDS = Number(args.rounds);

/** An exchange as the broker hands it over: ids from the rules, times from performance.now(). */
function exchange(provider, client, upstreamMs) {
  return {
    provider: provider === undefined ? undefined : { rule: { id: provider } },
    client: { rule: { name: client } },
    startedAt: performance.now(),
    upstreamMs,
  };
}

/** Median ns per call over ROUNDS rounds of N calls (after one warm-up round). */
function measure(fn) {
  const times = [];
  for (let r = 0; r <= ROUNDS; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < N; i++) fn(i);
    const ns = Number(process.hrtime.bigint() - t0) / N;
    if (r > 0) times.push(ns);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)];
}

const exchanges = [
  exchange("openai", "default", 120.5),
  exchange("anthropic", "default", 900),
  exchange("openai", "cron", 35),
  exchange(undefined, "default", 0),
];
const bytes = { bytesIn: 1024, bytesOut: 512 };
const metrics = new BrokerMetrics();
const cells = measure((i) => {
  const x = exchanges[i & 3];
  metrics.request(x, "injected", i & 1 ? 200 : 503, undefined, bytes);
});

const registry = new Registry();
const counter = new Counter({
  name: "requests_total",
  help: "h",
  labelNames: ["provider", "client", "decision", "status"],
  registers: [registry],
});
const histogram = (name, bounds) =>
  new Histogram({
    name,
    help: "h",
    labelNames: ["provider"],
    buckets: bounds.map((ms) => ms / 1000),
    registers: [registry],
  });
const upstream = histogram("upstream_seconds", UPSTREAM_BOUNDS_MS);
const overhead = histogram("overhead_seconds", OVERHEAD_BOUNDS_MS);
const children = exchanges.map((x) => ({
  ok: counter.labels(x.provider?.rule.id ?? "", x.client.rule.name, "injected", "2xx"),
  failed: counter.labels(x.provider?.rule.id ?? "", x.client.rule.name, "injected", "5xx"),
  upstream: upstream.labels(x.provider?.rule.id ?? ""),
  overhead: overhead.labels(x.provider?.rule.id ?? ""),
}));
const promClient = measure((i) => {
  const c = children[i & 3];
  (i & 1 ? c.ok : c.failed).inc();
  c.upstream.observe(exchanges[i & 3].upstreamMs / 1000);
  c.overhead.observe(0.0002);
});

console.log(`node ${process.version}, ${N} calls x ${ROUNDS} rounds, median ns per request:`);
console.log(`  BrokerMetrics.request (cells, as the broker counts)        ${cells.toFixed(1)} ns`);
console.log(`  prom-client labelled children (counter + 2 histograms)     ${promClient.toFixed(1)} ns`);
