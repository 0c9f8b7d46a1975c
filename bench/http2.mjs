#!/usr/bin/env node
// HTTP/2 and gRPC through keybroker beside HTTP/1.1 and a direct connection (docs/http2.md).
//
//   node bench/http2.mjs [--seconds S]
//
// All on 127.0.0.1: an upstream speaking HTTP/2 and HTTP/1.1 (bench/h2-upstream.mjs, its own
// process), keybroker from dist/ (bench/broker.mjs), and this process as the client:
//   - h2: 32 concurrent streams on one connection (undici with allowH2), direct and through
//     the broker;
//   - h1: 32 concurrent requests on 32 keep-alive connections, direct and through the broker;
//   - gRPC unary (32 concurrent calls) and server streaming (10 000 messages), @grpc/grpc-js,
//     direct and through the broker (grpc_proxy).
// Every answer must be a 200 / gRPC OK, which the upstream gives only for the real key.
// The machine is shared with the client and the upstream: figures are indicative.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import * as grpc from "@grpc/grpc-js";
import { Agent, ProxyAgent, request } from "undici";
import { PLACEHOLDER, REAL_KEY, startBroker } from "./broker.mjs";
import { makeUpstreamCerts } from "./certs.mjs";
import { startChild, stopAll } from "./procs.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const { values } = parseArgs({ options: { seconds: { type: "string", default: "5" } } });
const SECONDS = Number(values.seconds);
const CONC = 32;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kb-bench-h2-"));
const certs = makeUpstreamCerts(dir);
const { value: port } = await startChild({
  name: "h2-upstream",
  cmd: process.execPath,
  args: [
    path.join(HERE, "h2-upstream.mjs"),
    JSON.stringify({ cert: certs.cert, key: certs.key, realKey: REAL_KEY }),
  ],
  env: process.env,
  logFile: path.join(dir, "upstream.log"),
  ready: (line) => (line.startsWith("{") ? JSON.parse(line).port : null),
});
const home = path.join(dir, "home");
fs.mkdirSync(home, { mode: 0o700 });
const broker = await startBroker({
  dir,
  home,
  name: "h2",
  upstream: { port, ca: certs.ca },
  wildHosts: [],
  variant: {},
  nodeOptions: [],
});
const upstreamCa = fs.readFileSync(certs.ca, "utf8");
const brokerCa = broker.caPem.toString();
const url = `https://localhost:${port}/v1/chat/completions`;

/** Runs `one` from CONC loops for SECONDS; returns requests per second. */
async function load(one) {
  const end = performance.now() + SECONDS * 1000;
  let n = 0;
  await Promise.all(
    Array.from({ length: CONC }, async () => {
      while (performance.now() < end) {
        await one();
        n++;
      }
    }),
  );
  return n / SECONDS;
}

function http(dispatcher, key) {
  return async () => {
    const r = await request(url, { method: "POST", dispatcher, headers: { authorization: key }, body: "{}" });
    await r.body.text();
    if (r.statusCode !== 200) throw new Error(`status ${r.statusCode}`);
  };
}

const direct = (h2) => new Agent({ allowH2: h2, connections: h2 ? 1 : CONC, connect: { ca: upstreamCa } });
const proxied = (h2) =>
  new ProxyAgent({
    uri: broker.proxyUrl,
    allowH2: h2,
    connections: h2 ? 1 : CONC,
    requestTls: { ca: brokerCa, allowH2: h2 },
  });

const method = (name, stream) => ({
  path: `/bench.B/${name}`,
  requestStream: false,
  responseStream: stream,
  requestSerialize: (v) => Buffer.from(JSON.stringify(v)),
  requestDeserialize: (b) => JSON.parse(b.toString()),
  responseSerialize: (v) => Buffer.from(JSON.stringify(v)),
  responseDeserialize: (b) => JSON.parse(b.toString()),
});
const Client = grpc.makeGenericClientConstructor(
  { Unary: method("Unary", false), Stream: method("Stream", true) },
  "B",
);
function grpcClient(viaBroker) {
  if (viaBroker) process.env.grpc_proxy = broker.proxyUrl;
  const c = new Client(
    `localhost:${port}`,
    grpc.credentials.createSsl(Buffer.from(viaBroker ? brokerCa : upstreamCa)),
  );
  delete process.env.grpc_proxy;
  return c;
}
function md(key) {
  const m = new grpc.Metadata();
  m.set("authorization", key);
  return m;
}
const unary = (c, key) => () =>
  new Promise((resolve, reject) => c.Unary({}, md(key), (err) => (err ? reject(err) : resolve())));
async function streamRate(c, key) {
  const t = performance.now();
  let n = 0;
  await new Promise((resolve, reject) => {
    const call = c.Stream({}, md(key));
    call.on("data", () => n++);
    call.on("error", reject);
    call.on("end", resolve);
  });
  if (n !== 10_000) throw new Error(`got ${n} messages`);
  return n / ((performance.now() - t) / 1000);
}

const rows = [];
try {
  for (const h2 of [true, false]) {
    const d = direct(h2);
    const p = proxied(h2);
    rows.push([
      h2 ? "h2, 32 streams on 1 connection" : "HTTP/1.1, 32 connections",
      await load(http(d, REAL_KEY)),
      await load(http(p, PLACEHOLDER)),
      "req/s",
    ]);
    await d.close();
    await p.close();
  }
  const gd = grpcClient(false);
  const gp = grpcClient(true);
  rows.push([
    "gRPC unary, 32 concurrent",
    await load(unary(gd, REAL_KEY)),
    await load(unary(gp, PLACEHOLDER)),
    "calls/s",
  ]);
  rows.push([
    "gRPC server stream, 10 000 messages",
    await streamRate(gd, REAL_KEY),
    await streamRate(gp, PLACEHOLDER),
    "msgs/s",
  ]);
  gd.close();
  gp.close();
} finally {
  await stopAll();
}
console.log("| scenario | direct | keybroker | ratio | unit |\n|---|---|---|---|---|");
for (const [name, d, k, unit] of rows)
  console.log(`| ${name} | ${Math.round(d)} | ${Math.round(k)} | ${(k / d).toFixed(2)}x | ${unit} |`);
