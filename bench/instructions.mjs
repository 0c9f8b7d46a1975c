#!/usr/bin/env node
// Instructions the broker executes per request, counted by valgrind's callgrind: the same count
// for the same build and load whatever else the machine is doing, where CPU time on this shared
// VM moves by a factor of two from one minute to the next. Use it to compare two builds or two
// settings; use `npm run bench` and the peer harness for time.
//
//   node bench/instructions.mjs [--n 1000] [--warmup 8000] [--concurrency 1] [--stream | --download MIB]
//                               [--variant NAME] [--node-options "..."] [--env K=V,...]
//                               [--top 25] [--keep] [--ca DIR]
//
// `--download MIB` makes each request a download of MIB MiB (give small counts: `--warmup 3
// --n 5`); the figure is then per download, and only user space still, so a change that trades
// instructions for system calls shows only its first half here.
// `--ca DIR` starts the broker with the CA in DIR (ca.pem, ca-key.pem; a home's `ca` folder):
// making one under valgrind (an RSA key) takes minutes on a busy machine.
// `--variant` takes a broker configuration from bench/variants.mjs (its rule-file snippets, its
// environment and node flags; `realistic` turns on roles, a policy, the audit log and a scraped
// /metrics, so a feature's cost is seen when it is used, not only when it is off).
//
// What runs: the bench's fake upstream (its own process, not counted) and keybroker under
// `valgrind --tool=callgrind --instr-atstart=no`, started like bench/peer-extra.sh starts it.
// This process sends `--warmup` requests (JIT warm, leaf minted, connections open), switches
// instrumentation on with callgrind_control, sends `--n` more, and dumps the counts. Only user
// space is counted: the kernel's share of a socket write is not in these figures.
//
// Prints instructions per request, split by where they ran: JIT-compiled JavaScript (callgrind
// cannot name it), V8's runtime, compilers and GC, OpenSSL, node's own C++ and libuv, libc; then the
// functions with the most instructions of their own. To compare two builds, use the figure
// without the compilers and the old generation's collections: both come when they come, not
// with each request (see OLD_GC). What requests promote does cost full collections in the end:
// compare that share over a long window (`--n 16000`). Needs valgrind (Debian: apt-get install
// valgrind). About a minute for the defaults.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { BROKER_MAIN, REAL_KEY, ruleFile, startUpstream } from "./broker.mjs";
import { makeTarget } from "./client.mjs";
import { startChild, stopAll, stopChild } from "./procs.mjs";
import { VARIANTS } from "./variants.mjs";

const { values: opts } = parseArgs({
  options: {
    n: { type: "string", default: "1000" },
    warmup: { type: "string", default: "8000" },
    concurrency: { type: "string", default: "1" },
    stream: { type: "boolean", default: false },
    download: { type: "string" },
    variant: { type: "string", default: "default" },
    "node-options": { type: "string" },
    env: { type: "string", default: "" },
    top: { type: "string", default: "25" },
    keep: { type: "boolean", default: false },
    ca: { type: "string" },
    help: { type: "boolean", default: false },
  },
});
if (opts.help) {
  console.log(fs.readFileSync(fileURLToPath(import.meta.url), "utf8").split("\nimport ")[0]);
  process.exit(0);
}
const variant = VARIANTS.find((v) => v.name === opts.variant);
if (variant === undefined) {
  console.error(`--variant: no variant "${opts.variant}" in bench/variants.mjs`);
  process.exit(1);
}
if (variant.oauth || variant.redis || variant.isolated) {
  console.error(`--variant ${variant.name}: needs what bench/run.mjs sets up; use a rule-file variant`);
  process.exit(1);
}
const N = Number(opts.n);
const WARMUP = Number(opts.warmup);
/** What each request is, when it is not a plain POST. */
const WHAT =
  opts.download !== undefined
    ? `downloads of ${opts.download} MiB`
    : opts.stream
      ? "SSE streams of 20 chunks"
      : "";
const CONC = Number(opts.concurrency);
const log = (msg) => process.stderr.write(`[instructions] ${msg}\n`);

function need(cmd) {
  try {
    execFileSync(cmd, ["--version"], { stdio: "ignore" });
  } catch {
    console.error(`${cmd} not found: apt-get install valgrind`);
    process.exit(1);
  }
}
need("valgrind");

const COMPILERS = "V8 compilers (TurboFan, Liftoff, ...)";
/**
 * The old generation's collections. Requests promote a few KB each, so a full collection comes
 * every few thousand requests: whether a window of `--n` holds one of them or none moves the
 * count by 15,000-20,000 a request (4,000 requests of the realistic variant, 11-28), more than
 * most changes do.
 */
const OLD_GC = "V8 old-generation GC (marking, sweeping, compaction)";

/** Which part of the process a function belongs to, from its object file and name. */
function category(object, fn) {
  if (object === "???" || object.startsWith("???")) return "JIT code (JavaScript, WebAssembly)";
  if (/libc\.so|ld-linux/.test(object)) return "libc";
  if (/libstdc\+\+|libgcc/.test(object)) return "libstdc++";
  if (!/\/node$/.test(object)) return object;
  if (
    /^(ossl_|OSSL_|EVP_|SSL_|ssl|tls|BIO_|CRYPTO_|ERR_|OPENSSL_|aes|AES_|gcm|ghash|x25519|ecp_|BN_|bn_|RSA_|rsa_|EC_|ec_|sha|SHA|CRYPTO|RAND_|rand_|dtls|X509|x509|ASN1|asn1|PEM_|OBJ_|HMAC|hmac|chacha|poly1305|aesni|_x86_64_AES|ChaCha|Poly1305|bsaes|vpaes)/i.test(
      fn,
    ) ||
    /\bossl_|gcm_|aesni_/.test(fn)
  )
    return "OpenSSL";
  if (/^v8::internal::(compiler|maglev|wasm|baseline)::|^v8::internal::(Optimizing|Concurrent)/.test(fn))
    return COMPILERS;
  if (
    /^(Builtins_|v8::|Builtin|void v8::|bool v8::|int v8::|unsigned long v8::)/.test(fn) &&
    /MarkCompact|IncrementalMarking|Marking(Visitor|Worklist|Barrier|State)|Sweeper|Evacuat|MarkingJob/.test(
      fn,
    )
  )
    return OLD_GC;
  if (
    /^(Builtins_|v8::|Builtin)/.test(fn) &&
    /Heap|Scaveng|Mark|Sweep|GC|Evacuat|Marking|Remembered|Slot|Page|MemoryChunk|Allocation|LocalHeap|Spaces?\b|NewSpace|PagedSpace|MemoryAllocator|Collector/.test(
      fn,
    )
  )
    return "V8 GC and allocation";
  if (/^(Builtins_|v8::|Builtin|_ZN2v8)/.test(fn))
    return "V8 builtins and runtime (interpreter, inline caches, ...)";
  if (/^(llhttp|node::|uv_|uv__|_ZN4node)/.test(fn)) return "node C++, llhttp, libuv";
  return "node binary, other";
}

/** Parses callgrind_annotate's flat listing of one dump: {total, rows: [{ir, object, fn}]}. */
function readAnnotate(file) {
  const text = execFileSync("callgrind_annotate", ["--threshold=100", "--inclusive=no", "--auto=no", file], {
    maxBuffer: 256 * 1024 * 1024,
  }).toString();
  const rows = [];
  let total = 0;
  for (const line of text.split("\n")) {
    const t = /^\s*([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS/.exec(line);
    if (t) total = Number(t[1].replaceAll(",", ""));
    // "  24,563,250 ( 7.03%)  ???:Builtins_LoadIC [/usr/bin/node]"
    const m = /^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*?):(.*?)(?:\s+\[(.*)\])?\s*$/.exec(line);
    if (!m || line.includes("PROGRAM TOTALS")) continue;
    rows.push({ ir: Number(m[1].replaceAll(",", "")), object: m[4] ?? m[2], fn: m[3] });
  }
  return { total, rows };
}

/**
 * Names JIT code from V8's perf map ("<start hex> <size hex> <name>" per line): returns a
 * function from callgrind's "0x…" label to V8's name for it ("JS:*name file:line"), or the label when it is not found.
 */
function readPerfMap(file, keepAs) {
  let entries = [];
  try {
    entries = fs
      .readFileSync(file, "utf8")
      .split("\n")
      .map((line) => /^([0-9a-f]+) ([0-9a-f]+) (.*)$/.exec(line))
      .filter(Boolean)
      .map((m) => ({
        start: BigInt(`0x${m[1]}`),
        end: BigInt(`0x${m[1]}`) + BigInt(`0x${m[2]}`),
        name: m[3],
      }))
      .sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0));
    fs.renameSync(file, keepAs);
  } catch {
    return (label) => label;
  }
  return (label) => {
    if (!/^0x[0-9a-f]+$/.test(label)) return label;
    const at = BigInt(label);
    let lo = 0;
    let hi = entries.length - 1;
    let found;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (entries[mid].start <= at) {
        found = entries[mid];
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return found !== undefined && at < found.end ? found.name : label;
  };
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "kb-instr-"));
const cgOut = path.join(tmp, "callgrind.out");
let exitCode = 0;
try {
  const { child: upstreamChild, upstream } = await startUpstream(tmp);
  const config = path.join(tmp, "keybroker.yaml");
  fs.writeFileSync(
    config,
    ruleFile({ upstreamPort: upstream.port, upstreamCa: upstream.ca, wildHosts: [], variant }),
  );
  const home = path.join(tmp, "home");
  if (opts.ca !== undefined) {
    fs.mkdirSync(path.join(home, "ca"), { recursive: true, mode: 0o700 });
    for (const f of ["ca.pem", "ca-key.pem"])
      fs.copyFileSync(path.join(opts.ca, f), path.join(home, "ca", f));
  }
  const extraEnv = Object.fromEntries(
    opts.env
      .split(",")
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
  );
  const flags =
    opts["node-options"] !== undefined
      ? opts["node-options"].split(/\s+/).filter(Boolean)
      : (variant.nodeOptions ?? ["--max-semi-space-size=2", "--single-threaded-gc", "--no-node-snapshot"]);
  log("starting keybroker under callgrind (instrumentation off until the warm-up is done)");
  const started = await startChild({
    name: "keybroker under callgrind",
    cmd: "valgrind",
    args: [
      "--tool=callgrind",
      "--instr-atstart=no",
      `--callgrind-out-file=${cgOut}`,
      process.execPath,
      // V8 writes /tmp/perf-<pid>.map (JIT code address → function name): callgrind cannot
      // name JIT code, the map can.
      "--perf-basic-prof-only-functions",
      ...flags,
      BROKER_MAIN,
      "start",
      "--home",
      home,
      "--config",
      config,
      "--port",
      "0",
    ],
    env: { ...process.env, BENCH_REAL_KEY: REAL_KEY, ...variant.env, ...extraEnv },
    logFile: path.join(tmp, "keybroker.log"),
    ready: (line) => /keybroker listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(line)?.[1],
    timeoutMs: 600_000,
  });
  const broker = {
    proxyUrl: `http://127.0.0.1:${started.value}`,
    caPem: fs.readFileSync(path.join(home, "ca", "ca.pem")),
    pid: started.child.pid,
  };
  const target = makeTarget({ name: "keybroker", upstream, broker });
  const d = target.dispatcher({ connections: CONC });
  const one = async () => {
    if (opts.download !== undefined) return target.download(d, Number(opts.download));
    if (!opts.stream) return target.post(d);
    const res = await target.openStream(d, { bench_chunks: 20, bench_interval_ms: 0 });
    for await (const _ of res.body);
  };
  const run = async (count) => {
    let left = count;
    await Promise.all(
      Array.from({ length: CONC }, async () => {
        while (left-- > 0) await one();
      }),
    );
  };
  // A scraped broker: /metrics asked once, so its registry and process metrics exist as in a
  // monitored deployment. Before the warm-up: the first scrape loads and runs code that makes V8
  // throw away optimized code of the request path, which the warm-up then rebuilds.
  if (variant.scrape) {
    const res = await fetch(`${broker.proxyUrl}/metrics`);
    if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
    await res.text();
  }
  log(`warm-up: ${WARMUP} requests`);
  await run(WARMUP);

  const control = (...args) => execFileSync("callgrind_control", args, { stdio: "ignore" });
  control("-i", "on", String(broker.pid));
  log(`measuring: ${N} requests${WHAT ? ` (${WHAT})` : ""}, ${CONC} at a time`);
  const t0 = performance.now();
  await run(N);
  const seconds = (performance.now() - t0) / 1000;
  control("-i", "off", String(broker.pid));
  control("-d", String(broker.pid));
  await d.close();
  await stopChild(started.child, 10_000);
  await stopChild(upstreamChild);

  // The dump callgrind_control asked for; the one written at exit holds only the shutdown.
  const dumps = fs.readdirSync(tmp).filter((f) => /^callgrind\.out\.\d+$/.test(f));
  const jitName = readPerfMap(`/tmp/perf-${broker.pid}.map`, path.join(tmp, "perf.map"));
  let total = 0;
  const byFn = new Map();
  for (const f of dumps) {
    const { total: t, rows } = readAnnotate(path.join(tmp, f));
    total += t;
    for (const r of rows) {
      const key = `${r.object}\0${r.object === "???" ? jitName(r.fn) : r.fn}`;
      byFn.set(key, (byFn.get(key) ?? 0) + r.ir);
    }
  }
  const perReq = (ir) => Math.round(ir / N);
  const cats = new Map();
  for (const [key, ir] of byFn) {
    const [object, fn] = key.split("\0");
    const c = category(object, fn);
    cats.set(c, (cats.get(c) ?? 0) + ir);
  }
  console.log(
    `keybroker instructions per request: ${perReq(total).toLocaleString("en")} ` +
      `(${N} ${WHAT || "1 KB POSTs"}, concurrency ${CONC}, ` +
      `variant ${variant.name}, node flags: ${flags.join(" ") || "none"}${opts.env ? `, env ${opts.env}` : ""}; ${seconds.toFixed(1)} s under callgrind)`,
  );
  // TurboFan goes on optimizing functions that became hot late (a timer's callback, a rare
  // branch) long after the warm-up: that share moves between runs, the rest repeats within ~1 %.
  const compiling = cats.get(COMPILERS) ?? 0;
  console.log(`without the compilers: ${perReq(total - compiling).toLocaleString("en")} per request`);
  // Steadier still for comparing two builds: a window's share of full collections is its luck.
  const oldGc = cats.get(OLD_GC) ?? 0;
  console.log(
    `without the compilers and the old generation's collections: ${perReq(total - compiling - oldGc).toLocaleString("en")} per request`,
  );
  console.log("\n| where | instructions per request | share |\n|:--|--:|--:|");
  for (const [c, ir] of [...cats].sort((a, b) => b[1] - a[1])) {
    console.log(`| ${c} | ${perReq(ir).toLocaleString("en")} | ${((100 * ir) / total).toFixed(1)} % |`);
  }
  console.log(`\n| function (self) | object | per request | share |\n|:--|:--|--:|--:|`);
  for (const [key, ir] of [...byFn].sort((a, b) => b[1] - a[1]).slice(0, Number(opts.top))) {
    const [object, fn] = key.split("\0");
    const name = fn.length > 70 ? `${fn.slice(0, 67)}...` : fn;
    console.log(
      `| \`${name.replaceAll("|", "\\|")}\` | ${path.basename(object)} | ${perReq(ir).toLocaleString("en")} | ${((100 * ir) / total).toFixed(1)} % |`,
    );
  }
} catch (err) {
  console.error(`[instructions] failed: ${err.message}`);
  exitCode = 1;
} finally {
  await stopAll();
  if (opts.keep) log(`kept ${tmp}`);
  else fs.rmSync(tmp, { recursive: true, force: true });
}
process.exit(exitCode);
