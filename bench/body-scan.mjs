// The cost of searching request bodies for placeholders under `intercept: all` (proxy/stages/
// check-body-placeholders.ts), for docs/reliability.md. Not part of `npm run bench`:
//
//   node bench/body-scan.mjs [dist folder]     (default: ./dist; build first)
//
// 1. The search alone: 1 MiB of JSON-like text through ScrubPatterns.firstMatch in 16 KiB
//    chunks (what a request socket delivers), with 42 placeholders (14 providers × 3 clients);
//    and a gzip body of it, gunzip alone against gunzip + search.
// 2. Requests/s through an in-process broker with `intercept: all` to a host without a provider,
//    32 in flight, 1 KiB and 1 MiB bodies, with the stage and with a copy of dist whose pipeline
//    leaves it out (made here in a temporary folder).
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:https";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip, gzipSync } from "node:zlib";
import { ProxyAgent, request } from "undici";

const dist = resolve(process.argv[2] ?? "dist");
const { ScrubPatterns } = await import(join(dist, "proxy/scrub-stream.js"));

const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const placeholders = Array.from({ length: 42 }, (_, i) => {
  let s = `sk-kb-${i}-kbph-`;
  for (let k = 0; k < 32; k++) s += ALPHABET[(i * 7919 + k * 104729) % 62];
  return s;
});
const patterns = new ScrubPatterns(placeholders.map((secret) => ({ secret, replacement: "" })));

let text = "";
for (let i = 0; text.length < 1 << 20; i++) {
  text += `${JSON.stringify({ role: "user", content: `Message ${i}: please summarise the file\nsk-notes ${Math.random()}` })},`;
}
const body = Buffer.from(text).subarray(0, 1 << 20);
const CHUNK = 16 * 1024;

function scanOnce(data) {
  let held = Buffer.alloc(0);
  for (let i = 0; i < data.length; i += CHUNK) {
    const chunk = data.subarray(i, i + CHUNK);
    const all = held.length === 0 ? chunk : Buffer.concat([held, chunk]);
    const { pair, hold } = patterns.firstMatch(all, false);
    if (pair !== -1) throw new Error("unexpected match");
    held = Buffer.from(all.subarray(hold));
  }
  patterns.firstMatch(held, true);
}

function best(runs, fn) {
  let min = Number.POSITIVE_INFINITY;
  for (let r = 0; r < runs; r++) {
    const t = process.hrtime.bigint();
    fn();
    min = Math.min(min, Number(process.hrtime.bigint() - t) / 1e9);
  }
  return min;
}

async function bestAsync(runs, fn) {
  let min = Number.POSITIVE_INFINITY;
  for (let r = 0; r < runs; r++) {
    const t = process.hrtime.bigint();
    await fn();
    min = Math.min(min, Number(process.hrtime.bigint() - t) / 1e9);
  }
  return min;
}

const mib = (s) => (1 / s).toFixed(0);
const scan = best(30, () => scanOnce(body));
const gz = gzipSync(body);
const gunzipOnly = async (search) => {
  await pipeline(
    Readable.from(
      (function* () {
        for (let i = 0; i < gz.length; i += CHUNK) yield gz.subarray(i, i + CHUNK);
      })(),
    ),
    createGunzip(),
    new Writable({
      write(chunk, _e, done) {
        if (search) patterns.firstMatch(chunk, false);
        done();
      },
    }),
  );
};
const g0 = await bestAsync(15, () => gunzipOnly(false));
const g1 = await bestAsync(15, () => gunzipOnly(true));
console.log(
  `search: ${mib(scan)} MiB/s plain (1 MiB in 16 KiB chunks, ${placeholders.length} placeholders, ${patterns.size} forms)`,
);
console.log(`gzip:   gunzip alone ${mib(g0)} MiB/s, gunzip + search ${mib(g1)} MiB/s`);

// 2. Requests/s through a broker.
const { Broker } = await import(join(dist, "proxy/server.js"));
const { parseRules } = await import(join(dist, "rules/load.js"));
const { loadOrCreateCa } = await import(join(dist, "certs/ca.js"));
const { LeafMinter } = await import(join(dist, "certs/leaf.js"));
const { createLogger } = await import(join(dist, "core/log.js"));

const upDir = mkdtempSync(join(tmpdir(), "kb-scan-up-"));
const upCa = loadOrCreateCa(upDir);
const leaf = new LeafMinter(upCa).mint("plain.test");
const upstream = createServer({ cert: leaf.certPem, key: leaf.keyPem }, (req, res) => {
  req.resume();
  req.on("end", () => res.end("ok"));
});
await new Promise((r) => upstream.listen(0, "127.0.0.1", r));

async function rps(distDir, size) {
  const { Broker: B } = await import(join(distDir, "proxy/server.js"));
  const home = mkdtempSync(join(tmpdir(), "kb-scan-home-"));
  const yaml = `version: 1
intercept: all
upstream_ca: [${JSON.stringify(upCa.certPath)}]
resolve: { "plain.test:443": "127.0.0.1:${upstream.address().port}" }
providers:
  openai:
    credentials: ["env:SCAN_KEY"]
`;
  const broker = await B.create({
    home,
    rules: parseRules(yaml, "bench", home),
    log: createLogger("error"),
    env: { SCAN_KEY: "sk-real-scan-0123456789abcdef" },
    port: 0,
  });
  const addr = await broker.listen();
  const agent = new ProxyAgent({
    uri: addr.url,
    requestTls: { ca: readFileSync(broker.ca.certPath, "utf8") },
  });
  const payload = Buffer.alloc(size, "x");
  const one = async () => {
    const res = await request("https://plain.test/upload", {
      method: "POST",
      dispatcher: agent,
      body: payload,
    });
    await res.body.text();
  };
  for (let i = 0; i < 200; i++) await one();
  const seconds = 3;
  let done = 0;
  const until = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (performance.now() < until) {
        await one();
        done++;
      }
    }),
  );
  await agent.close();
  await broker.close();
  return done / seconds;
}

// Inside the project, so the copy finds node_modules.
const without = mkdtempSync(join(dist, "..", ".body-scan-"));
cpSync(dist, join(without, "dist"), { recursive: true });
const pipelineJs = join(without, "dist/proxy/pipeline.js");
writeFileSync(pipelineJs, readFileSync(pipelineJs, "utf8").replace(/^\s*checkBodyPlaceholders,$/m, ""));
for (const size of [1024, 1 << 20]) {
  const rows = [];
  for (let round = 0; round < 3; round++) {
    rows.push([await rps(dist, size), await rps(join(without, "dist"), size)]);
  }
  const med = (i) =>
    rows
      .map((r) => r[i])
      .sort((a, b) => a - b)[1]
      .toFixed(0);
  console.log(
    `${size === 1024 ? "1 KiB" : "1 MiB"} POST, 32 in flight: with the stage ${med(0)} req/s, without ${med(1)} req/s (medians of 3 interleaved 3 s runs)`,
  );
}
upstream.close();
rmSync(without, { recursive: true, force: true });
void Broker;
