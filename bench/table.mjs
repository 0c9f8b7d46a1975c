// Markdown rendering of a bench result (the JSON run.mjs saves): one table comparing direct and
// keybroker figure by figure, plus the variants table when more than one variant ran.
//
// Comparison column: for rates (req/s, MiB/s) and costs the ratio keybroker/direct; for
// latencies the milliseconds keybroker adds. The last column holds docs/spec.md §14's bar where it is an
// absolute one; bars relative to squid need the peer harness (docs/performance.md).

import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

/** 3 significant-ish digits: 12345 → "12345", 123.4 → "123", 12.34 → "12.3", 1.234 → "1.23". */
export function num(x) {
  if (x == null || Number.isNaN(x)) return "–";
  const a = Math.abs(x);
  if (a >= 100) return String(Math.round(x));
  if (a >= 10) return x.toFixed(1);
  return x.toFixed(2);
}
const ratio = (k, d) => (k == null || d == null || d === 0 ? "–" : `${(k / d).toFixed(2)}×`);
const added = (k, d) => {
  if (k == null || d == null) return "–";
  const ms = k - d;
  return `${ms < 0 ? "−" : "+"}${num(Math.abs(ms))} ms`;
};
const bar = (text, ok, miss = "**over**") => (ok == null ? text : `${text}: ${ok ? "ok" : miss}`);

/** A count, as an integer. */
const int = (x) => (x == null ? "–" : String(Math.round(x)));

/** The rows: [figure, direct, keybroker, comparison, bar]. */
export function comparisonRows(r) {
  const rows = [];
  const pair = (section) => r[section] ?? {};
  const row = (figure, d, k, cmp, barText = "") => rows.push([figure, num(d), num(k), cmp, barText]);

  const seq = pair("seq");
  if (seq.direct) {
    const add = seq.keybroker.p50_ms - seq.direct.p50_ms;
    row(
      "seq 1 KB POST, one keep-alive connection: p50 (ms)",
      seq.direct.p50_ms,
      seq.keybroker.p50_ms,
      added(seq.keybroker.p50_ms, seq.direct.p50_ms),
      bar("≤ direct + 0.3 ms", add <= 0.3),
    );
    row(
      "seq 1 KB POST: p99 (ms)",
      seq.direct.p99_ms,
      seq.keybroker.p99_ms,
      added(seq.keybroker.p99_ms, seq.direct.p99_ms),
    );
    if (seq.keybroker.broker_us_per_req != null) {
      row("seq: broker CPU per request (µs)", null, seq.keybroker.broker_us_per_req, "–");
      row(
        "seq: upstream CPU per request (µs)",
        seq.direct.upstream_us_per_req,
        seq.keybroker.upstream_us_per_req,
        ratio(seq.keybroker.upstream_us_per_req, seq.direct.upstream_us_per_req),
      );
    }
  }
  const thr = pair("thr");
  if (thr.direct) {
    const c = thr.direct.concurrency;
    const of = thr.direct.rounds ? `, median of ${thr.direct.rounds} rounds` : "";
    row(
      `throughput, ${c} workers, 1 KB POST (req/s${of})`,
      thr.direct.rps,
      thr.keybroker.rps,
      ratio(thr.keybroker.rps, thr.direct.rps),
      "≥ squid's (peer harness)",
    );
    row(
      `throughput c=${c}: p50 (ms)`,
      thr.direct.p50_ms,
      thr.keybroker.p50_ms,
      added(thr.keybroker.p50_ms, thr.direct.p50_ms),
    );
    row(
      `throughput c=${c}: p99 (ms)`,
      thr.direct.p99_ms,
      thr.keybroker.p99_ms,
      added(thr.keybroker.p99_ms, thr.direct.p99_ms),
    );
    if (thr.keybroker.upstream_tls_handshakes != null) {
      row(
        "throughput: upstream TLS handshakes while measuring (most in a round)",
        thr.direct.upstream_tls_handshakes,
        thr.keybroker.upstream_tls_handshakes,
        "–",
        bar("0: connections reused", thr.keybroker.upstream_tls_handshakes === 0, "**not reused**"),
      );
    }
    row("throughput: broker CPU per request (µs)", null, thr.keybroker.broker_cpu_us_per_req, "–");
    row(
      "throughput: upstream CPU per request (µs)",
      thr.direct.upstream_cpu_us_per_req,
      thr.keybroker.upstream_cpu_us_per_req,
      ratio(thr.keybroker.upstream_cpu_us_per_req, thr.direct.upstream_cpu_us_per_req),
    );
    row(
      "throughput: client CPU per request (µs)",
      thr.direct.client_cpu_us_per_req,
      thr.keybroker.client_cpu_us_per_req,
      ratio(thr.keybroker.client_cpu_us_per_req, thr.direct.client_cpu_us_per_req),
    );
    row("throughput: broker CPU (cores busy)", null, thr.keybroker.broker_cores, "–");
    row(
      "throughput: whole machine CPU busy (cores)",
      thr.direct.machine_busy_cores,
      thr.keybroker.machine_busy_cores,
      "–",
    );
    row(
      "throughput: of which irq/softirq, no process (cores)",
      thr.direct.irq_cores,
      thr.keybroker.irq_cores,
      "–",
    );
    row(
      "throughput: of which other processes: noise (cores)",
      thr.direct.other_processes_cores,
      thr.keybroker.other_processes_cores,
      "–",
      "≈ 0 on a quiet machine",
    );
  }
  const sse = pair("sse");
  if (sse.direct) {
    const s = sse.direct;
    const label = `SSE ${s.streams}×${s.chunks} @${s.interval_ms} ms`;
    row(
      `${label}: time to first chunk p50 (ms)`,
      s.ttfb_p50_ms,
      sse.keybroker.ttfb_p50_ms,
      added(sse.keybroker.ttfb_p50_ms, s.ttfb_p50_ms),
    );
    row(
      `${label}: time to first chunk p99 (ms)`,
      s.ttfb_p99_ms,
      sse.keybroker.ttfb_p99_ms,
      added(sse.keybroker.ttfb_p99_ms, s.ttfb_p99_ms),
    );
    row(
      `${label}: chunk one-way p50 (ms)`,
      s.oneway_p50_ms,
      sse.keybroker.oneway_p50_ms,
      added(sse.keybroker.oneway_p50_ms, s.oneway_p50_ms),
    );
    row(
      `${label}: chunk one-way p99 (ms)`,
      s.oneway_p99_ms,
      sse.keybroker.oneway_p99_ms,
      added(sse.keybroker.oneway_p99_ms, s.oneway_p99_ms),
      "≤ squid's (peer harness)",
    );
  }
  const big = pair("big");
  if (big.direct) {
    row(
      `${big.direct.mb} MiB download, best of ${big.direct.runs_mib_s.length} (MiB/s)`,
      big.direct.best_mib_s,
      big.keybroker.best_mib_s,
      ratio(big.keybroker.best_mib_s, big.direct.best_mib_s),
      "≥ squid's (peer harness)",
    );
    row("download: broker CPU per GiB (s)", null, big.keybroker.broker_cpu_s_per_gib, "–");
  }
  const nh = pair("newHost");
  if (nh.direct) {
    const n = nh.keybroker.hosts;
    row(
      "new connection, already-seen host: p50 (ms)",
      nh.direct.seen_p50_ms,
      nh.keybroker.seen_p50_ms,
      added(nh.keybroker.seen_p50_ms, nh.direct.seen_p50_ms),
    );
    row(
      `new connection, first request to a new host: p50 of ${n} (ms)`,
      nh.direct.fresh_p50_ms,
      nh.keybroker.fresh_p50_ms,
      added(nh.keybroker.fresh_p50_ms, nh.direct.fresh_p50_ms),
    );
    row(
      "new host minus seen host, median of pairs (ms)",
      nh.direct.added_p50_ms,
      nh.keybroker.added_p50_ms,
      "–",
      bar("≤ 10 ms added", nh.keybroker.added_p50_ms <= 10),
    );
  }
  if (r.mint) {
    row("(in-process: LeafMinter.secureContext for a new host, p50 ms)", null, r.mint.p50_ms, "–");
    row(
      "(in-process: of which the certificate, LeafMinter.mint, p50 ms)",
      null,
      r.mint.mint_only_p50_ms,
      "–",
    );
  }
  const mem = r.memory;
  if (mem) {
    row("broker idle RSS after start (MiB)", null, mem.idle_rss_mib, "–");
    if (mem.bare_node_rss_mib != null)
      row("(bare `node -e` process idle RSS, for reference, MiB)", null, mem.bare_node_rss_mib, "–");
    if (mem.peak_hwm_mib != null) {
      row(
        "broker peak RSS over the load above (VmHWM, MiB)",
        null,
        mem.peak_hwm_mib,
        "–",
        bar("≤ 100 MiB", mem.peak_hwm_mib <= 100),
      );
    }
    if (mem.broker_cpu_total_s != null)
      row("broker CPU over the whole comparison (s)", null, mem.broker_cpu_total_s, "–");
  }
  const idle = pair("idle");
  if (idle.direct) {
    const n = idle.direct.streams.toLocaleString("en-US");
    row(
      `${n} idle SSE streams: time to open all (s)`,
      idle.direct.open_s,
      idle.keybroker.open_s,
      ratio(idle.keybroker.open_s, idle.direct.open_s),
    );
    row(`${n} idle streams: fresh broker's RSS before (MiB)`, null, idle.idle_rss_mib, "–");
    row(
      `${n} idle streams: broker RSS while open (MiB)`,
      null,
      idle.keybroker.broker_rss_open_mib,
      "–",
      bar("≤ 150 MiB", idle.keybroker.broker_rss_open_mib <= 150),
    );
    // Only the direct run's growth means something: the keybroker run reuses memory both
    // processes already grew (and freed) for the direct run.
    row(
      `${n} idle streams, for scale: upstream RSS growth, TLS server side (MiB)`,
      idle.direct.upstream_rss_growth_mib,
      null,
      "–",
    );
    row(
      `${n} idle streams, for scale: client RSS growth, undici TLS client side (MiB)`,
      idle.direct.client_rss_growth_mib,
      null,
      "–",
    );
    row(
      `${n} idle streams: broker RSS 1 s after closing (MiB)`,
      null,
      idle.keybroker.broker_rss_after_close_mib,
      "–",
    );
    rows.push([
      "upstream streams still open after the client closed",
      int(idle.direct.upstream_still_open_after_close),
      int(idle.keybroker.upstream_still_open_after_close),
      "–",
      bar(
        "0 expected",
        idle.keybroker.upstream_still_open_after_close === 0 &&
          idle.direct.upstream_still_open_after_close === 0,
        "**not 0**",
      ),
    ]);
  }
  return rows;
}

function markdown(header, rows, align) {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (cells) =>
    `| ${cells.map((c, i) => (align[i] === "r" ? String(c).padStart(widths[i]) : String(c).padEnd(widths[i]))).join(" | ")} |`;
  const sep = `|${widths.map((w, i) => (align[i] === "r" ? `${"-".repeat(w + 1)}:` : `:${"-".repeat(w + 1)}`)).join("|")}|`;
  return [line(header), sep, ...rows.map(line)].join("\n");
}

/** The variants table: throughput per broker configuration, relative to `default`. */
export function variantsTable(variants) {
  const base = variants.find((v) => v.name === "default" && v.result)?.result;
  const rows = variants.map((v) => {
    if (!v.result) return [v.name, "skipped", "–", "–", "–", "–", "–", "–", v.skipped ?? ""];
    const t = v.result;
    return [
      v.name,
      num(t.rps),
      num(t.p50_ms),
      num(t.p99_ms),
      num(t.broker_cpu_us_per_req),
      num(t.total_cpu_us_per_req),
      num(v.peak_hwm_mib),
      base ? ratio(t.rps, base.rps) : "–",
      v.note ?? "",
    ];
  });
  const header = [
    "variant",
    "req/s",
    "p50 (ms)",
    "p99 (ms)",
    "broker CPU µs/req",
    "all CPU µs/req",
    "peak RSS (MiB)",
    "req/s vs default",
    "note",
  ];
  return markdown(header, rows, ["l", "r", "r", "r", "r", "r", "r", "r", "l"]);
}

/** The whole report: a header, the comparison table, notes and (if any) the variants table. */
export function report(r) {
  const m = r.meta;
  const out = [
    `keybroker bench — ${m.started_at} — ${m.cpus} × ${m.cpu_model}, ${m.nproc} cores (nproc), Node ${m.node}, undici ${m.undici}`,
    `mode: ${m.quick ? "quick" : "full"}${m.upstream_h2 ? "; upstream speaks HTTP/2 (100 streams a connection)" : ""}; broker node flags: ${m.node_options.length ? m.node_options.join(" ") : "(none)"}; ` +
      `SSE clock: ${m.clock}; wall time ${num(m.wall_s)} s`,
    `other processes' CPU before the start: ${num(m.background_cores)} cores (the "other processes" rows show it during throughput)`,
    "",
    markdown(
      ["figure", "direct", "keybroker", "keybroker vs direct", "docs/spec.md §14 bar"],
      comparisonRows(r),
      ["l", "r", "r", "r", "l"],
    ),
  ];
  const v = r.validity;
  if (v) {
    const parts = Object.entries(v).map(([k, x]) =>
      x.direct == null ? `${k} ${x.keybroker}` : `${k} ${x.direct} + ${x.keybroker}`,
    );
    out.push(
      "",
      `Valid run: every request reached the upstream with exactly the real key (requests, direct + keybroker: ${parts.join(", ")}).`,
    );
  }
  if (r.memory?.hwm_after) {
    const steps = Object.entries(r.memory.hwm_after).map(([k, x]) => `${k} ${num(x)}`);
    out.push(`Broker VmHWM (MiB) after each step: ${steps.join(", ")}.`);
  }
  if (r.variants && r.variants.length > 1)
    out.push("", "Throughput per broker configuration:", "", variantsTable(r.variants));
  return `${out.join("\n")}\n`;
}

// `node bench/table.mjs bench/results/<time>.json` prints the report of a saved run again.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const file of process.argv.slice(2))
    process.stdout.write(report(JSON.parse(readFileSync(file, "utf8"))));
}
