#!/usr/bin/env node
// `npm run bench`: keybroker against a direct connection, on this machine, in one run.
//
//   node bench/run.mjs [--quick] [--duration S] [--rounds N] [--only seq,thr,sse,big,newhost,idle,variants]
//                      [--variants default,...] [--node-options "--max-semi-space-size=4"]
//                      [--seq-n N] [--idle-streams N] [--out FILE.json] [--keep] [--upstream-h2]
//
// What runs, all on 127.0.0.1:
//   - a fake LLM provider (bench/upstream.mjs, its own process) behind a throwaway test CA;
//     HTTP/1.1, or with --upstream-h2 HTTP/2 as well (100 streams per connection), as the big
//     providers speak: keybroker then multiplexes its upstream requests;
//   - keybroker, started like bench/peer-extra.sh does (rule file in a temp folder,
//     `node dist/cli/main.js start --home H --config F --port 0`), with --node-options as flags of
//     its node process;
//   - the client, this process (undici 7): an Agent straight to the upstream ("direct", real key)
//     and a ProxyAgent through the broker ("keybroker", placeholder).
// Each scenario runs direct, then keybroker, back to back, so both see the same machine state.
// After each one the upstream's counters must match what the client sent, all with exactly the
// real key and no client errors; otherwise the bench stops with an error rather than print figures.
//
// Why the upstream is a separate process: in this process its TLS and the client's would share
// one thread, and that thread, not the proxy, would set the throughput. The SSE one-way latency
// still needs one clock for both: the upstream stamps chunks with CLOCK_MONOTONIC
// (process.hrtime), which all processes share, and the offset is checked over /__bench/clock.
// The price: client, upstream and broker are three processes on (here) two cores, as in the peer
// harness, so the broker competes for CPU with both. The table reports the CPU of each.
//
// Prints a Markdown table on stdout (progress goes to stderr) and saves the raw figures as JSON in
// bench/results/ (git-ignored). Full run ≈ 1.5 min on 2 cores, --quick ≈ 15 s.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { BROKER_MAIN, startBroker, startRedis, startUpstream } from "./broker.mjs";
import { BENCH_DOMAIN } from "./certs.mjs";
import { checkRun, InvalidRunError, makeControl, makeTarget } from "./client.mjs";
import { launchBroker, launchCost } from "./isolated.mjs";
import { cpuSeconds, machineCpu, memoryMiB, startChild, stopAll, stopChild } from "./procs.mjs";
import * as scenarios from "./scenarios.mjs";
import { median, nowMs, sharedClockMs, sleep } from "./stats.mjs";
import { report } from "./table.mjs";
import { VARIANTS } from "./variants.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));

// ------------------------------------------------------------------------------- settings
const FULL = {
  seq: { warmup: 200, n: 2000, maxSeconds: 30 },
  thr: { conc: 32, warmupS: 1, durationS: 8, rounds: 3 },
  sse: { streams: 20, chunks: 200, intervalMs: 10 },
  big: { mb: 100, runs: 2 },
  newHost: { hosts: 20 },
  idle: { streams: 1000, openers: 50, settleMs: 1000 },
  brokerSettleMs: 1000,
  watchdogS: 480,
};
const QUICK = {
  seq: { warmup: 50, n: 300, maxSeconds: 10 },
  thr: { conc: 32, warmupS: 0.5, durationS: 2, rounds: 1 },
  sse: { streams: 20, chunks: 50, intervalMs: 10 },
  big: { mb: 20, runs: 1 },
  newHost: { hosts: 6 },
  idle: { streams: 200, openers: 50, settleMs: 500 },
  brokerSettleMs: 500,
  watchdogS: 180,
};
const ALL_STEPS = ["seq", "thr", "sse", "big", "newhost", "idle", "variants"];

const OPTIONS = {
  quick: { type: "boolean", default: false },
  duration: { type: "string" },
  rounds: { type: "string" },
  only: { type: "string", default: ALL_STEPS.join(",") },
  variants: { type: "string" },
  // The flags `npm start` and bench/peer-extra.sh give the broker's node.
  "node-options": {
    type: "string",
    default: "--max-semi-space-size=2 --single-threaded-gc --no-node-snapshot",
  },
  "idle-streams": { type: "string" },
  "seq-n": { type: "string" },
  out: { type: "string" },
  keep: { type: "boolean", default: false },
  "upstream-h2": { type: "boolean", default: false },
  help: { type: "boolean", short: "h", default: false },
};

// `--node-options "--flag"`: parseArgs refuses a separate value that starts with a dash, so
// glue it on as `--node-options=--flag` first.
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length - 1; i++) {
  if (argv[i] === "--node-options") argv.splice(i, 2, `--node-options=${argv[i + 1]}`);
}
const args = parseCommandLine(argv);
function parseCommandLine(list) {
  try {
    return parseArgs({ args: list, options: OPTIONS }).values;
  } catch (err) {
    return fail(`${err.message} (see --help)`);
  }
}
if (args.help) {
  // The header comment of this file is the help text.
  const lines = fs
    .readFileSync(fileURLToPath(import.meta.url), "utf8")
    .split("\n")
    .slice(1);
  const header = lines.slice(
    0,
    lines.findIndex((l) => !l.startsWith("//")),
  );
  process.stdout.write(`${header.map((l) => l.slice(3)).join("\n")}\n`);
  process.exit(0);
}
const opts = structuredClone(args.quick ? QUICK : FULL);
if (args.duration) opts.thr.durationS = Number(args.duration);
if (args.rounds) opts.thr.rounds = Math.max(1, Number(args.rounds));
if (args["idle-streams"]) opts.idle.streams = Number(args["idle-streams"]);
if (args["seq-n"]) opts.seq.n = Math.max(1, Number(args["seq-n"]));
const steps = new Set(args.only.split(",").map((s) => s.trim()));
for (const s of steps)
  if (!ALL_STEPS.includes(s)) fail(`--only: unknown step "${s}" (steps: ${ALL_STEPS.join(", ")})`);
const nodeOptions = args["node-options"].split(/\s+/).filter(Boolean);
const variants = args.variants
  ? args.variants
      .split(",")
      .map(
        (name) =>
          VARIANTS.find((v) => v.name === name) ??
          fail(`--variants: no variant "${name}" in bench/variants.mjs`),
      )
  : VARIANTS.filter((v) => !v.optIn);

function fail(message) {
  process.stderr.write(`bench: ${message}\n`);
  process.exit(2);
}

const t0 = nowMs();
const log = (msg) =>
  process.stderr.write(`[bench ${((nowMs() - t0) / 1000).toFixed(1).padStart(5)} s] ${msg}\n`);

// ------------------------------------------------------------------------------- cleanup
let tmpDir = null;
let control = null;
let cleaning = null;
function cleanup() {
  cleaning ??= (async () => {
    await stopAll();
    await control?.close().catch(() => {});
    if (tmpDir && !args.keep) fs.rmSync(tmpDir, { recursive: true, force: true });
    else if (tmpDir) process.stderr.write(`bench: kept ${tmpDir}\n`);
  })();
  return cleaning;
}
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(sig, () => {
    process.stderr.write(`bench: ${sig}, stopping\n`);
    cleanup().finally(() => process.exit(130));
  });
}
const watchdog = setTimeout(() => {
  process.stderr.write(`bench: still running after ${opts.watchdogS} s, giving up\n`);
  cleanup().finally(() => process.exit(1));
}, opts.watchdogS * 1000);
watchdog.unref();

// ------------------------------------------------------------------------------- helpers

/** Server clock minus ours, from the fastest of 50 round trips; 0 if the clocks already agree. */
async function calibrateClock() {
  let best = null;
  for (let i = 0; i < 50; i++) {
    const a = sharedClockMs();
    const { now } = await control.clock();
    const b = sharedClockMs();
    if (!best || b - a < best.rtt) best = { rtt: b - a, offset: now - (a + b) / 2 };
  }
  const shared = Math.abs(best.offset) <= best.rtt / 2 + 0.05;
  const what = shared ? "shared monotonic clock" : "calibrated offset";
  return {
    offset: shared ? 0 : best.offset,
    text: `${what} (measured offset ${best.offset.toFixed(3)} ms, best RTT ${best.rtt.toFixed(3)} ms)`,
  };
}

/** Runs one scenario on one target and checks it against the upstream's counters. */
async function runChecked(label, fn, target, env, validity) {
  await control.stats(true);
  const before = target.sent;
  log(`${label}: ${target.name}`);
  const result = await fn(target, env);
  const counts = checkRun(label, target, before, await control.stats());
  validity[label] ??= {};
  validity[label][target.name] = (validity[label][target.name] ?? 0) + counts.requests;
  return result;
}

/** Cores other processes kept busy over `ms` (this process idle meanwhile): how quiet the machine is. */
async function backgroundLoad(ms) {
  const m0 = machineCpu();
  const c0 = process.cpuUsage();
  await sleep(ms);
  const m = machineCpu();
  const c = process.cpuUsage(c0);
  return Math.max(0, m.busy - m0.busy - (m.irq - m0.irq) - (c.user + c.system) / 1e6) / (ms / 1000);
}

/** One result from several rounds of the same scenario: the median of each numeric field. */
function medianOfRounds(list) {
  if (list.length === 1) return list[0];
  const out = { ...list[0], rounds: list.length };
  for (const [k, v] of Object.entries(list[0])) {
    if (typeof v === "number") out[k] = median(list.map((r) => r[k]).filter((x) => x != null));
  }
  return out;
}

/** Times LeafMinter.secureContext in this process: what minting costs without any network. */
async function inProcessMint(home, n) {
  try {
    const dist = path.dirname(path.dirname(BROKER_MAIN));
    const { loadOrCreateCa } = await import(pathToFileURL(path.join(dist, "certs/ca.js")).href);
    const { LeafMinter } = await import(pathToFileURL(path.join(dist, "certs/leaf.js")).href);
    const minter = new LeafMinter(loadOrCreateCa(home));
    minter.secureContext(`warm.${BENCH_DOMAIN}`);
    const times = [];
    const mintOnly = [];
    for (let i = 0; i < n; i++) {
      let t = nowMs();
      minter.secureContext(`m${i}.${BENCH_DOMAIN}`);
      times.push(nowMs() - t);
      t = nowMs();
      minter.mint(`x${i}.${BENCH_DOMAIN}`); // the certificate alone, without the TLS context
      mintOnly.push(nowMs() - t);
    }
    return { p50_ms: median(times), mint_only_p50_ms: median(mintOnly) };
  } catch (err) {
    log(`in-process mint timing skipped: ${err.message}`);
    return null;
  }
}

function machine() {
  let nproc = os.availableParallelism();
  try {
    nproc = Number(execFileSync("nproc", { encoding: "utf8" }).trim());
  } catch {}
  const require = createRequire(import.meta.url);
  return {
    started_at: new Date().toISOString(),
    nproc,
    cpus: os.cpus().length,
    cpu_model: os.cpus()[0]?.model?.trim() ?? "unknown CPU",
    node: process.version,
    undici: require("undici/package.json").version,
    quick: args.quick,
    node_options: nodeOptions,
    upstream_h2: args["upstream-h2"],
  };
}

// ------------------------------------------------------------------------------- main
async function main() {
  if (!fs.existsSync(BROKER_MAIN)) fail(`${BROKER_MAIN} is missing: run \`npm run build\` first`);
  const result = { meta: machine(), opts, validity: {} };
  result.meta.background_cores = await backgroundLoad(1000);
  if (result.meta.background_cores > 0.25) {
    log(
      `warning: other processes keep ${result.meta.background_cores.toFixed(2)} cores busy: expect noisy figures`,
    );
  }
  tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), "keybroker-bench-"));
  const home = path.join(tmpDir, "home");

  // The upstream, its certificates, and a side channel to its counters.
  const { upstream } = await startUpstream(tmpDir, { h2: args["upstream-h2"] });
  control = makeControl(upstream);
  const clock = await calibrateClock();
  result.meta.clock = clock.text;
  log(`upstream on 127.0.0.1:${upstream.port}; SSE clock: ${clock.text}`);

  const seenHost = `seen.${BENCH_DOMAIN}`;
  const freshHosts = Array.from({ length: opts.newHost.hosts }, (_, i) => `h${i}.${BENCH_DOMAIN}`);
  const env = { opts, control, clockOffset: clock.offset, upstreamPid: upstream.pid, seenHost, freshHosts };
  const brokerFor = (name, variant) =>
    startBroker({
      dir: tmpDir,
      home,
      name,
      upstream,
      wildHosts: [seenHost, ...freshHosts],
      variant,
      nodeOptions,
    });
  const defaultVariant = VARIANTS.find((v) => v.name === "default");
  const direct = makeTarget({ name: "direct", upstream });

  // A bare `node` process's RSS: the floor under the broker's idle figure.
  const bare = await startChild({
    name: "bare node",
    cmd: process.execPath,
    args: ["-e", "setInterval(() => {}, 1000); console.log('ready')"],
    env: process.env,
    logFile: path.join(tmpDir, "bare-node.log"),
    ready: (line) => line === "ready",
  });
  await sleep(opts.brokerSettleMs);
  const bareRss = memoryMiB(bare.child.pid).rss;
  await stopChild(bare.child);

  // ---- the main comparison on one broker: 2, 1, 3, 4 (the peer harness's load), then 6; 5 alongside
  const main = ["seq", "thr", "sse", "big", "newhost"].filter((s) => steps.has(s));
  if (main.length) {
    const broker = await brokerFor("default", defaultVariant);
    await sleep(opts.brokerSettleMs);
    const mem0 = memoryMiB(broker.pid);
    const cpu0 = cpuSeconds(broker.pid);
    log(`keybroker on ${broker.proxyUrl} (pid ${broker.pid}), idle RSS ${mem0.rss.toFixed(1)} MiB`);
    const kb = makeTarget({ name: "keybroker", upstream, broker });
    result.memory = { bare_node_rss_mib: bareRss, idle_rss_mib: mem0.rss, hwm_after: { start: mem0.hwm } };
    const table = {
      seq: scenarios.sequential,
      thr: scenarios.throughput,
      sse: scenarios.sse,
      big: scenarios.download,
    };
    for (const step of main) {
      const key = step === "newhost" ? "newHost" : step;
      const fn = step === "newhost" ? scenarios.newHost : table[step];
      // Throughput is the noisiest figure: it runs in interleaved rounds (direct, keybroker,
      // direct, ...) and each field is the median over the rounds; all rounds stay in the JSON.
      const rounds = step === "thr" ? opts.thr.rounds : 1;
      const per = { direct: [], keybroker: [] };
      for (let i = 0; i < rounds; i++) {
        per.direct.push(await runChecked(step, fn, direct, env, result.validity));
        per.keybroker.push(await runChecked(step, fn, kb, env, result.validity));
      }
      result[key] = { direct: medianOfRounds(per.direct), keybroker: medianOfRounds(per.keybroker) };
      for (const side of ["direct", "keybroker"]) {
        // A connection not reused in any round counts, not the median round's.
        const handshakes = per[side].map((r) => r.upstream_tls_handshakes).filter((x) => x != null);
        if (handshakes.length > 0) result[key][side].upstream_tls_handshakes = Math.max(...handshakes);
      }
      if (rounds > 1) result[key].per_round = per;
      result.memory.hwm_after[step] = memoryMiB(broker.pid).hwm;
    }
    result.memory.peak_hwm_mib = memoryMiB(broker.pid).hwm;
    result.memory.broker_cpu_total_s = cpuSeconds(broker.pid) - cpu0;
    await broker.stop();
  }

  // ---- 7. idle streams, on a fresh broker so the figure is not the previous load's heap
  if (steps.has("idle")) {
    const broker = await brokerFor("idle", defaultVariant);
    await sleep(opts.brokerSettleMs);
    const kb = makeTarget({ name: "keybroker", upstream, broker });
    const idleRss = memoryMiB(broker.pid).rss;
    result.idle = {
      idle_rss_mib: idleRss,
      direct: await runChecked("idle", scenarios.idleStreams, direct, env, result.validity),
      keybroker: await runChecked("idle", scenarios.idleStreams, kb, env, result.validity),
    };
    for (const side of ["direct", "keybroker"]) {
      const r = result.idle[side];
      if (r.upstream_open_while_held !== r.streams) {
        throw new InvalidRunError(
          `idle streams (${side}): the upstream held ${r.upstream_open_while_held} of ${r.streams}`,
        );
      }
    }
    await broker.stop();
  }

  // ---- 8. throughput per broker configuration: one broker per variant, all started first
  // (an idle broker costs no CPU), then interleaved rounds across the variants.
  if (steps.has("variants")) {
    result.variants = [];
    const onlyDefault = variants.length === 1 && variants[0].name === "default";
    if (onlyDefault && result.thr) {
      result.variants.push({
        ...variants[0],
        result: result.thr.keybroker,
        note: "the throughput rows above",
      });
    } else {
      const running = [];
      // The fleet variant's Redis, started only when it runs.
      const redis = variants.some((v) => v.redis) ? await startRedis(tmpDir) : undefined;
      for (const v of variants) if (v.redis) v.top = `state: ${redis.url}`;
      for (const variant of variants) {
        try {
          const plain = await brokerFor(`variant-${variant.name}`, variant);
          const broker =
            variant.isolated || variant.launched
              ? await launchBroker(plain, {
                  dir: tmpDir,
                  home,
                  name: `variant-${variant.name}`,
                  upstream,
                  isolate: Boolean(variant.isolated),
                })
              : plain;
          if (variant.isolated) {
            variant.launch = launchCost(plain, home);
            log(
              `variant ${variant.name}: per launch ${variant.launch.isolated_ms.toFixed(0)} ms isolated, ${variant.launch.plain_ms.toFixed(0)} ms plain`,
            );
          }
          running.push({
            variant,
            broker,
            kb: makeTarget({ name: "keybroker", upstream, broker }),
            rounds: [],
          });
        } catch (err) {
          if (variant.name === "default") throw err;
          // The broker's last log line says why (e.g. an unknown rule-file key), minus temp paths.
          const why = err.message.trim().split("\n").at(-1).trim().replaceAll(tmpDir, "…");
          log(`variant ${variant.name} skipped: the broker did not start: ${why}`);
          running.push({ variant, skipped: why.slice(0, 160) });
        }
      }
      await sleep(opts.brokerSettleMs);
      for (let i = 0; i < opts.thr.rounds; i++) {
        for (const v of running.filter((x) => x.broker)) {
          v.rounds.push(
            await runChecked(
              `variant ${v.variant.name}`,
              scenarios.variantThroughput,
              v.kb,
              env,
              result.validity,
            ),
          );
        }
      }
      for (const v of running) {
        if (!v.broker) {
          result.variants.push({ ...v.variant, skipped: v.skipped });
          continue;
        }
        result.variants.push({
          ...v.variant,
          result: medianOfRounds(v.rounds),
          peak_hwm_mib: memoryMiB(v.broker.pid).hwm,
        });
        await v.broker.stop();
      }
      await redis?.stop();
    }
  }

  // ---- diagnostics: minting alone, in this process, with nothing else running
  if (steps.has("newhost")) result.mint = await inProcessMint(home, opts.newHost.hosts);

  result.meta.wall_s = (nowMs() - t0) / 1000;
  const resultsDir = path.join(HERE, "results");
  const out = args.out ?? path.join(resultsDir, `${result.meta.started_at.replace(/[:.]/g, "-")}.json`);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  log(`done in ${result.meta.wall_s.toFixed(1)} s; raw figures in ${path.relative(process.cwd(), out)}`);
  process.stdout.write(report(result));
}

try {
  await main();
  await cleanup();
  process.exit(0);
} catch (err) {
  process.stderr.write(
    `\nbench FAILED: ${err instanceof InvalidRunError ? err.message : (err?.stack ?? err)}\n`,
  );
  await cleanup();
  process.exit(1);
}
