#!/usr/bin/env node
// A flood of idle CONNECTs against one broker, with a well-behaved client sending requests all
// along; prints the broker's RSS before, during and after, and the good client's success rate
// (docs/reliability.md, "Connections: timeouts, caps, floods").
//
//   node bench/connection-flood.mjs [--flood 3000] [--cap N] [--handshake 10s] [--hold-ms 15000] [--rounds 1]
//                                   [--client mixed|fresh]
//
// The flood's sockets send a CONNECT to the provider's host, get the 200, and then never start
// TLS. The good client is an undici ProxyAgent through the broker with one keep-alive connection
// opened before the flood, plus a fresh connection every 25th request (new clients arriving);
// with `--client fresh` every request opens a new tunnel (a CONNECT of its own, as curl does).
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { ProxyAgent, request } from "undici";
import { PLACEHOLDER, startBroker, startUpstream } from "./broker.mjs";
import { memoryMiB, stopAll } from "./procs.mjs";

const { values: opt } = parseArgs({
  options: {
    flood: { type: "string", default: "3000" },
    cap: { type: "string" },
    handshake: { type: "string", default: "10s" },
    "hold-ms": { type: "string", default: "15000" },
    rounds: { type: "string", default: "1" },
    client: { type: "string", default: "mixed" },
  },
});
const FLOOD = Number(opt.flood);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => console.error(...a);

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kb-flood-"));
const home = path.join(dir, "home");
const { upstream } = await startUpstream(dir);
const top = [
  `timeouts: { handshake: ${opt.handshake} }`,
  opt.cap === undefined ? "" : `limits: { connections: ${opt.cap} }`,
].join("\n");
const broker = await startBroker({
  dir,
  home,
  name: "flood",
  upstream,
  wildHosts: [],
  variant: { top },
  nodeOptions: [],
});
const target = `localhost:${upstream.port}`;
const url = `https://${target}/v1/chat/completions`;
const fds = () => fs.readdirSync(`/proc/${broker.pid}/fd`).length;
const rss = () => ({ ...memoryMiB(broker.pid), fds: fds() });

// --- the good client
const stats = { ok: 0, failed: 0, errors: new Map() };
const keepAlive = new ProxyAgent({ uri: broker.proxyUrl, requestTls: { ca: broker.caPem }, connections: 1 });
async function send(dispatcher) {
  try {
    const res = await request(url, {
      method: "POST",
      dispatcher,
      headers: { authorization: `Bearer ${PLACEHOLDER}`, "content-type": "application/json" },
      body: '{"model":"m","messages":[]}',
    });
    await res.body.text();
    if (res.statusCode === 200) stats.ok++;
    else {
      stats.failed++;
      stats.errors.set(`status ${res.statusCode}`, (stats.errors.get(`status ${res.statusCode}`) ?? 0) + 1);
    }
  } catch (err) {
    stats.failed++;
    const key = err.code ?? err.message;
    stats.errors.set(key, (stats.errors.get(key) ?? 0) + 1);
  }
}
let running = true;
let n = 0;
const goodLoop = (async () => {
  while (running) {
    if (++n % 25 === 0 || opt.client === "fresh") {
      const fresh = new ProxyAgent({ uri: broker.proxyUrl, requestTls: { ca: broker.caPem } });
      await send(fresh);
      await fresh.close().catch(() => {});
    } else await send(keepAlive);
    await sleep(10);
  }
})();

function openIdle() {
  return new Promise((resolve) => {
    const s = net.connect(broker.port, "127.0.0.1");
    const out = { socket: s, accepted: false, closedAt: 0 };
    s.on("error", () => {});
    s.once("data", () => {
      out.accepted = true;
      resolve(out);
    });
    s.once("close", () => {
      out.closedAt = performance.now();
      resolve(out);
    });
    s.on("connect", () => s.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`));
  });
}

await sleep(1500);
const before = rss();
log(`before: ${before.rss.toFixed(1)} MiB`);
const phase = (name) => {
  const s = { ...stats, errors: Object.fromEntries(stats.errors) };
  stats.ok = 0;
  stats.failed = 0;
  stats.errors = new Map();
  log(name, JSON.stringify(s));
  return s;
};
phase("warm-up");

async function floodRound(round) {
  const started = performance.now();
  const flood = [];
  for (let i = 0; i < FLOOD; i += 100) {
    flood.push(...(await Promise.all(Array.from({ length: Math.min(100, FLOOD - i) }, openIdle))));
  }
  const openedMs = performance.now() - started;
  const accepted = flood.filter((f) => f.accepted).length;
  const during = rss();
  log(
    `flood of ${FLOOD} opened in ${openedMs.toFixed(0)} ms: ${accepted} accepted; RSS ${during.rss.toFixed(1)} MiB`,
  );

  // Hold until the broker has closed them all (handshake timeout) or hold-ms passed.
  const holdUntil = performance.now() + Number(opt["hold-ms"]);
  let peak = during.rss;
  while (performance.now() < holdUntil && flood.some((f) => f.accepted && f.closedAt === 0)) {
    await sleep(250);
    peak = Math.max(peak, rss().rss);
  }
  const closedByBroker = flood.filter((f) => f.accepted && f.closedAt !== 0);
  const closeTimes = closedByBroker.map((f) => f.closedAt - started).sort((a, b) => a - b);
  const duringGood = phase("during the flood");
  for (const f of flood) f.socket.destroy();
  await sleep(3000);
  const after3 = rss();
  await sleep(12_000);
  const after15 = rss();
  const afterGood = phase("after the flood");
  return {
    round,
    accepted,
    refused: FLOOD - accepted,
    openedMs: Math.round(openedMs),
    closedByBroker: closedByBroker.length,
    firstCloseMs: Math.round(closeTimes[0] ?? 0),
    lastCloseMs: Math.round(closeTimes.at(-1) ?? 0),
    rssMiB: {
      fdsDuring: during.fds,
      fdsAfter15s: after15.fds,
      during: +during.rss.toFixed(1),
      peak: +peak.toFixed(1),
      after3s: +after3.rss.toFixed(1),
      after15s: +after15.rss.toFixed(1),
    },
    goodDuring: { ok: duringGood.ok, failed: duringGood.failed, errors: duringGood.errors },
    goodAfter: { ok: afterGood.ok, failed: afterGood.failed },
  };
}
const rounds = [];
for (let r = 1; r <= Number(opt.rounds); r++) rounds.push(await floodRound(r));
running = false;
await goodLoop;
await keepAlive.close();

const result = {
  flood: FLOOD,
  cap: opt.cap ?? "default",
  client: opt.client,
  handshake: opt.handshake,
  rssBeforeMiB: +before.rss.toFixed(1),
  fdsBefore: before.fds,
  rounds,
};
console.log(JSON.stringify(result, null, 2));
await broker.stop();
await stopAll();
