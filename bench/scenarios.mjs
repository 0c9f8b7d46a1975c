// The measurements. Each scenario takes a target (client.mjs) and the shared `env`
// ({opts, control, clockOffset, upstreamPid, seenHost, freshHosts}) and returns plain numbers; run.mjs runs it once per
// target, checks the run against the upstream's counters, and keeps the result.
//
// Every loop is bounded, by a count or by a deadline, and every request has undici timeouts.
import { cpuSeconds, machineCpu, memoryMiB } from "./procs.mjs";
import { median, nowMs, sharedClockMs, sleep, summarize } from "./stats.mjs";

/**
 * CPU used from now until the returned function is called, in seconds: by the broker (if the
 * target goes through one), the upstream process and this (client) process; and for the whole
 * machine, what was busy, what went to interrupts/softirqs (charged to no process), and the
 * rest: other processes. On a shared machine that last figure says how noisy the run was.
 */
function cpuMeter(target, env) {
  const pid = target.broker?.pid;
  const b0 = pid ? cpuSeconds(pid) : null;
  // A launch's `run` process (bench/isolated.mjs): where the relay runs, if there is one.
  const lpid = target.broker?.launchPid;
  const l0 = lpid ? cpuSeconds(lpid) : null;
  const u0 = cpuSeconds(env.upstreamPid);
  const c0 = process.cpuUsage();
  const m0 = machineCpu();
  return (otherClientS = 0) => {
    const c = process.cpuUsage(c0);
    const m = machineCpu();
    const used = {
      broker_s: pid ? cpuSeconds(pid) - b0 : null,
      launch_s: lpid ? cpuSeconds(lpid) - l0 : null,
      upstream_s: cpuSeconds(env.upstreamPid) - u0,
      client_s: (c.user + c.system) / 1e6 + otherClientS,
      machine_busy_s: m.busy - m0.busy,
      irq_s: m.irq - m0.irq,
    };
    used.others_s = Math.max(
      0,
      used.machine_busy_s -
        used.irq_s -
        used.upstream_s -
        used.client_s -
        (used.broker_s ?? 0) -
        (used.launch_s ?? 0),
    );
    return used;
  };
}

/** Microseconds per request from CPU seconds (null stays null). */
const usPer = (seconds, n) => (seconds == null || !n ? null : (seconds * 1e6) / n);

// ----------------------------------------------------------------------------- 2. sequential
/** One keep-alive connection, one request at a time: the latency keybroker adds to each call. */
export async function sequential(target, env) {
  const { warmup, n, maxSeconds } = env.opts.seq;
  const d = target.dispatcher({ connections: 1 });
  try {
    for (let i = 0; i < warmup; i++) await target.post(d);
    const lat = [];
    const deadline = nowMs() + maxSeconds * 1000;
    const cpu = cpuMeter(target, env);
    for (let i = 0; i < n && nowMs() < deadline; i++) {
      const t = nowMs();
      await target.post(d);
      lat.push(nowMs() - t);
    }
    const used = cpu();
    const s = summarize(lat);
    return {
      n: s.n,
      p50_ms: s.p50,
      p99_ms: s.p99,
      max_ms: s.max,
      truncated: s.n < n,
      broker_us_per_req: usPer(used.broker_s, s.n),
      upstream_us_per_req: usPer(used.upstream_s, s.n),
    };
  } finally {
    await d.close();
  }
}

// ----------------------------------------------------------------------------- 1. throughput
/** `conc` workers posting back to back: requests per second, latency under load, CPU per request. */
export async function throughput(target, env) {
  const { conc, warmupS, durationS } = env.opts.thr;
  const d = target.dispatcher();
  const run = (seconds, lat) => target.load(d, conc, seconds, lat);
  try {
    await run(warmupS); // opens the connections (and the broker's upstream legs), warms the JIT
    const lat = [];
    const handshakes0 = (await env.control.stats()).tls_handshakes;
    const cpu = cpuMeter(target, env);
    const r = await run(durationS, lat);
    // An isolated launch's load generator is another process: its CPU is the client's.
    const used = cpu(r.client_cpu_s ?? 0);
    // Every connection was opened in the warm-up: a handshake now is a connection not reused.
    const handshakes = (await env.control.stats()).tls_handshakes - handshakes0;
    const s = summarize(lat);
    return {
      concurrency: conc,
      requests: r.ok,
      seconds: r.seconds,
      rps: r.ok / r.seconds,
      upstream_tls_handshakes: handshakes,
      p50_ms: s.p50,
      p99_ms: s.p99,
      broker_cpu_us_per_req: usPer(used.broker_s, r.ok),
      upstream_cpu_us_per_req: usPer(used.upstream_s, r.ok),
      client_cpu_us_per_req: usPer(used.client_s, r.ok),
      launch_cpu_us_per_req: usPer(used.launch_s, r.ok),
      // What one request costs the machine, wherever it is spent: on a shared machine a steadier
      // figure than req/s, which also depends on the CPU share the bench's processes get.
      total_cpu_us_per_req: usPer(
        (used.broker_s ?? 0) + used.upstream_s + used.client_s + (used.launch_s ?? 0),
        r.ok,
      ),
      broker_cores: used.broker_s == null ? null : used.broker_s / r.seconds,
      machine_busy_cores: used.machine_busy_s / r.seconds,
      irq_cores: used.irq_s / r.seconds,
      other_processes_cores: used.others_s / r.seconds,
    };
  } finally {
    await d.close();
  }
}

// ----------------------------------------------------------------------------- 3. SSE
/**
 * Reads one SSE response to the end. Records time to first chunk (from `t0`) and, per chunk,
 * the one-way latency: the upstream's send stamp (shared monotonic clock, corrected by the
 * calibrated offset) to the moment this process got the bytes.
 */
async function readStream(res, t0, expected, acc, clockOffset) {
  let buf = "";
  let seen = 0;
  let done = false;
  res.body.setEncoding("utf8");
  for await (const piece of res.body) {
    const tLocal = nowMs();
    const tShared = sharedClockMs();
    buf += piece;
    for (let idx = buf.indexOf("\n\n"); idx !== -1; idx = buf.indexOf("\n\n")) {
      const event = buf.slice(0, idx);
      buf = buf.slice(idx + 2);
      if (!event.startsWith("data: ")) continue;
      if (event === "data: [DONE]") {
        done = true;
        continue;
      }
      const chunk = JSON.parse(event.slice(6));
      if (chunk.seq !== seen) throw new Error(`SSE chunk ${chunk.seq} arrived as number ${seen}`);
      if (seen === 0) acc?.ttfb.push(tLocal - t0);
      acc?.oneway.push(tShared - (chunk.ts - clockOffset));
      seen++;
    }
  }
  if (seen !== expected || !done)
    throw new Error(`SSE stream incomplete: ${seen}/${expected} chunks, done=${done}`);
}

/**
 * `streams` concurrent SSE responses of `chunks` chunks `intervalMs` apart, after a warm-up round.
 * The measured streams start `intervalMs / streams` apart (0.5 ms for 20 × 10 ms), so their
 * chunks spread over each interval as independent clients' would, instead of 20 chunks leaving
 * the upstream in the same millisecond. Time to first chunk is then one stream's, not the tail of
 * a burst of 20 requests, and the one-way p99 is per-chunk forwarding delay plus pauses, not
 * the queue behind 19 other chunks. (The peer harness starts all at once; its p99 includes that.)
 */
export async function sse(target, env) {
  const { streams, chunks, intervalMs } = env.opts.sse;
  const d = target.dispatcher();
  const round = (n, acc, staggerMs) =>
    Promise.all(
      Array.from({ length: streams }, async (_, i) => {
        if (staggerMs) await sleep(i * staggerMs);
        const t0 = nowMs();
        const res = await target.openStream(d, { bench_chunks: n, bench_interval_ms: intervalMs });
        await readStream(res, t0, n, acc, env.clockOffset);
      }),
    );
  try {
    await round(5); // unrecorded: connection setup is not time to first byte
    const acc = { ttfb: [], oneway: [] };
    const cpu = cpuMeter(target, env);
    await round(chunks, acc, intervalMs / streams);
    const used = cpu();
    const ttfb = summarize(acc.ttfb);
    const ow = summarize(acc.oneway);
    return {
      streams,
      chunks,
      interval_ms: intervalMs,
      ttfb_p50_ms: ttfb.p50,
      ttfb_p99_ms: ttfb.p99,
      oneway_p50_ms: ow.p50,
      oneway_p99_ms: ow.p99,
      oneway_max_ms: ow.max,
      broker_cpu_s: used.broker_s,
    };
  } finally {
    await d.close();
  }
}

// ----------------------------------------------------------------------------- 4. download
/** GET /big: one warm-up MiB, then `runs` downloads of `mb` MiB; the best MiB/s. */
export async function download(target, env) {
  const { mb, runs } = env.opts.big;
  const d = target.dispatcher();
  try {
    await target.download(d, 1);
    const rates = [];
    const cpu = cpuMeter(target, env);
    for (let i = 0; i < runs; i++) rates.push(await target.download(d, mb));
    const used = cpu();
    return {
      mb,
      runs_mib_s: rates,
      best_mib_s: Math.max(...rates),
      broker_cpu_s_per_gib: used.broker_s == null ? null : used.broker_s / ((mb * runs) / 1024),
    };
  } finally {
    await d.close();
  }
}

// ----------------------------------------------------------------------------- 6. new host
/**
 * First request to a host the broker has never seen (CONNECT, leaf certificate minted, a new
 * upstream connection) against a request to an already-seen host, each over a brand-new client
 * connection (a fresh dispatcher per sample). The pairs alternate which goes first; the result
 * is the median of the per-pair differences. Direct runs the same loop as a reference: for it
 * the two kinds are the same work (a new TLS connection), so its difference is the noise floor.
 */
export async function newHost(target, env) {
  const hosts = env.freshHosts;
  const once = async (host) => {
    const d = target.dispatcher();
    try {
      const t0 = nowMs();
      await target.post(d, target.wildOrigin(host), true);
      return nowMs() - t0;
    } finally {
      await d.close();
    }
  };
  await once(env.seenHost); // mints the seen host's certificate (keybroker) and warms the paths
  await once(env.seenHost);
  const seen = [];
  const fresh = [];
  const diff = [];
  for (let i = 0; i < hosts.length; i++) {
    let s;
    let f;
    if (i % 2 === 0) {
      s = await once(env.seenHost);
      f = await once(hosts[i]);
    } else {
      f = await once(hosts[i]);
      s = await once(env.seenHost);
    }
    seen.push(s);
    fresh.push(f);
    diff.push(f - s);
  }
  return {
    hosts: hosts.length,
    seen_p50_ms: median(seen),
    fresh_p50_ms: median(fresh),
    fresh_max_ms: summarize(fresh).max,
    added_p50_ms: median(diff),
  };
}

// ----------------------------------------------------------------------------- 7. idle streams
/** Resolves on a body's first chunk, then pauses it (the stream stays open). */
function firstChunk(body) {
  body.on("error", () => {}); // destroying it later emits an abort error nobody else awaits
  return new Promise((resolve, reject) => {
    body.once("data", () => {
      body.pause();
      resolve();
    });
    body.once("error", reject);
    body.once("end", () => reject(new Error("idle stream ended early")));
  });
}

/**
 * Opens `streams` SSE responses that the upstream answers with one chunk and then holds open,
 * `openers` at a time; reads the broker's memory once they are all open and settled; closes
 * them and checks the upstream saw every one of them go away.
 */
export async function idleStreams(target, env) {
  const { streams, openers, settleMs } = env.opts.idle;
  const d = target.dispatcher();
  const open = [];
  let next = 0;
  // For scale: what holding the same streams costs the upstream (TLS server side) and this
  // process (TLS client side); the broker holds one of each per stream.
  const upstreamRss0 = memoryMiB(env.upstreamPid).rss;
  const clientRss0 = process.memoryUsage.rss() / 2 ** 20;
  const t0 = nowMs();
  try {
    await Promise.all(
      Array.from({ length: openers }, async () => {
        while (next < streams) {
          next++;
          const res = await target.openStream(d, { bench_idle: true });
          open.push(res);
          await firstChunk(res.body);
        }
      }),
    );
    const openSeconds = (nowMs() - t0) / 1000;
    await sleep(settleMs);
    const up = await env.control.stats();
    const pid = target.broker?.pid;
    const mem = pid ? memoryMiB(pid) : null;
    const upstreamGrowth = memoryMiB(env.upstreamPid).rss - upstreamRss0;
    const clientGrowth = process.memoryUsage.rss() / 2 ** 20 - clientRss0;
    for (const res of open) res.body.destroy();
    open.length = 0;
    await d.destroy();
    // The client going away must reach the upstream through the broker (bounded wait).
    let left = null;
    for (let i = 0; i < 50; i++) {
      left = (await env.control.stats()).idle_open;
      if (left === 0) break;
      await sleep(100);
    }
    await sleep(settleMs);
    return {
      streams,
      open_s: openSeconds,
      upstream_open_while_held: up.idle_open,
      broker_rss_open_mib: mem?.rss ?? null,
      upstream_rss_growth_mib: upstreamGrowth,
      client_rss_growth_mib: clientGrowth,
      broker_hwm_mib: mem?.hwm ?? null,
      broker_rss_after_close_mib: pid ? memoryMiB(pid).rss : null,
      upstream_still_open_after_close: left,
    };
  } finally {
    for (const res of open) res.body.destroy();
    await d.destroy().catch(() => {});
  }
}

// ----------------------------------------------------------------------------- 8. variants
/** Throughput only, on a broker started with one variant of the rule file. */
export const variantThroughput = throughput;
