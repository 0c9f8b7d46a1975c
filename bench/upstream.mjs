// The fake LLM provider, run by bench/run.mjs as its own child process (so its CPU is not the
// bench client's, and it can be measured on its own): HTTPS on 127.0.0.1, keep-alive.
//
//   POST /v1/chat/completions         ~1 KB chat.completion JSON
//     {"stream":true, "bench_chunks":N, "bench_interval_ms":M}
//                                     SSE: N chunks M ms apart, then `data: [DONE]`. Each chunk
//                                     carries `seq` and `ts`, its send time on the shared
//                                     monotonic clock (see below)
//     {"stream":true, "bench_idle":true}
//                                     SSE: one chunk, then nothing until the client goes away
//   GET  /big?mb=N                    N MiB of incompressible bytes
//   GET  /__bench/stats[?reset=1]     counters (not auth-checked); reset=1 zeroes them after reading
//   GET  /__bench/clock               {"now": ms} on the same clock as `ts`
//
// Every other request is auth-checked. It counts as ok only with exactly one Authorization
// header whose value is exactly `Bearer <real key>`, and no header anywhere still holding a
// placeholder. Anything else is a mismatch (a few are kept as samples). The bench compares these
// counts with what its client sent and refuses to print figures from an invalid run.
//
// Clock: `ts` is process.hrtime (CLOCK_MONOTONIC), which is one clock for every process on
// the machine, so the bench process can subtract it from its own hrtime without calibration.
// run.mjs still measures the offset over /__bench/clock and falls back to it if the clocks
// turn out not to agree.
//
// Config comes in one JSON argument: {cert, key, realKey, placeholders: [...], h2}. With `h2`
// it offers HTTP/2 beside HTTP/1.1 by ALPN and allows 100 streams at once on a connection, as
// the big providers do (run.mjs --upstream-h2).
// Once listening it prints one JSON line {"ready":true,"port":N} on stdout.
import crypto from "node:crypto";
import fs from "node:fs";
import http2 from "node:http2";
import https from "node:https";

const cfg = JSON.parse(process.argv[2] ?? "{}");
const EXPECTED_AUTH = `Bearer ${cfg.realKey}`;
const PLACEHOLDERS = cfg.placeholders ?? [];
const MIB = 1024 * 1024;
const BIG_BLOCK = crypto.randomBytes(MIB);
const clockMs = () => Number(process.hrtime.bigint()) / 1e6;

/** A chat.completion body of a little over 1 KB, built once. */
const CHAT_BODY = (() => {
  const message = { role: "assistant", content: "" };
  const body = {
    id: "chatcmpl-bench",
    object: "chat.completion",
    created: 1700000000,
    model: "gpt-bench-1",
    choices: [{ index: 0, message, finish_reason: "stop" }],
    usage: { prompt_tokens: 42, completion_tokens: 128, total_tokens: 170 },
  };
  while (Buffer.byteLength(JSON.stringify(body)) < 1024) message.content += "The quick brown fox jumps. ";
  return Buffer.from(JSON.stringify(body));
})();

// ------------------------------------------------------------------------------- counters
function freshStats() {
  return {
    requests: 0,
    auth_ok: 0,
    auth_mismatch: 0,
    mismatch_samples: [],
    idle_opened: 0,
    // TLS handshakes completed: with connection reuse, only a new client connection adds one.
    tls_handshakes: 0,
  };
}
let stats = freshStats();
/** Idle streams currently open (not reset with the counters: it is a level, not a count). */
let idleOpen = 0;

function authorizations(raw) {
  const out = [];
  for (let i = 0; i < raw.length; i += 2) if (raw[i].toLowerCase() === "authorization") out.push(raw[i + 1]);
  return out;
}

function checkAuth(req) {
  // An HTTP/2 request (--upstream-h2) has no headersDistinct on Node 20: its raw list says the same.
  const values = req.headersDistinct?.authorization ?? authorizations(req.rawHeaders);
  let ok = values.length === 1 && values[0] === EXPECTED_AUTH;
  if (ok) {
    const raw = req.rawHeaders;
    for (let i = 1; i < raw.length && ok; i += 2) {
      for (const p of PLACEHOLDERS) if (raw[i].includes(p)) ok = false;
    }
  }
  stats.requests++;
  if (ok) {
    stats.auth_ok++;
    return;
  }
  stats.auth_mismatch++;
  if (stats.mismatch_samples.length < 5) {
    // Samples show what arrived; the real key never appears here unless it was mangled.
    stats.mismatch_samples.push({ method: req.method, path: req.url, authorization: values });
  }
}

// ------------------------------------------------------------------------------- handlers
function sendJson(res, status, obj) {
  const body = Buffer.from(JSON.stringify(obj));
  res.writeHead(status, { "content-type": "application/json", "content-length": body.length });
  res.end(body);
}

function sseChunk(seq, last) {
  const obj = {
    object: "chat.completion.chunk",
    model: "gpt-bench-1",
    choices: [{ index: 0, delta: { content: ` tok${seq}` }, finish_reason: last ? "stop" : null }],
    seq,
    ts: clockMs(),
  };
  return `data: ${JSON.stringify(obj)}\n\n`;
}

function stream(res, n, intervalMs) {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  let i = 0;
  let timer = null;
  res.on("close", () => clearTimeout(timer));
  const tick = () => {
    if (res.destroyed) return;
    res.write(sseChunk(i, i === n - 1));
    i++;
    if (i < n) timer = setTimeout(tick, intervalMs);
    else res.end("data: [DONE]\n\n");
  };
  tick();
}

function idleStream(res) {
  stats.idle_opened++;
  idleOpen++;
  res.on("close", () => idleOpen--);
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  res.write(sseChunk(0, false));
}

function chat(req, res) {
  const parts = [];
  req.on("data", (c) => parts.push(c));
  req.on("end", () => {
    let body;
    try {
      body = JSON.parse(Buffer.concat(parts).toString("utf8"));
    } catch {
      return sendJson(res, 400, { error: "bad json" });
    }
    if (body.stream === true && body.bench_idle === true) return idleStream(res);
    if (body.stream === true) return stream(res, body.bench_chunks ?? 200, body.bench_interval_ms ?? 10);
    res.writeHead(200, { "content-type": "application/json", "content-length": CHAT_BODY.length });
    res.end(CHAT_BODY);
  });
}

function big(res, mb) {
  res.writeHead(200, { "content-type": "application/octet-stream", "content-length": mb * MIB });
  let left = mb;
  const pump = () => {
    while (left > 0) {
      left--;
      if (!res.write(BIG_BLOCK)) return void res.once("drain", pump);
    }
    res.end();
  };
  pump();
}

function handle(req, res) {
  const url = new URL(req.url, "https://upstream");
  if (url.pathname === "/__bench/stats") {
    const out = { ...stats, idle_open: idleOpen };
    if (url.searchParams.get("reset") === "1") stats = freshStats();
    return sendJson(res, 200, out);
  }
  if (url.pathname === "/__bench/clock") return sendJson(res, 200, { now: clockMs() });
  checkAuth(req);
  if (req.method === "POST" && url.pathname === "/v1/chat/completions") return chat(req, res);
  req.resume();
  if (req.method === "GET" && url.pathname === "/big") {
    return big(res, Math.max(0, Math.min(1024, Number(url.searchParams.get("mb")) | 0)));
  }
  sendJson(res, 404, { error: "not found" });
}

const tls = { cert: fs.readFileSync(cfg.cert), key: fs.readFileSync(cfg.key) };
const server = cfg.h2
  ? // 100 streams at once on a connection, about what the big providers allow.
    http2.createSecureServer({ ...tls, allowHTTP1: true, settings: { maxConcurrentStreams: 100 } }, handle)
  : https.createServer({ ...tls, keepAlive: true }, handle);
server.on("secureConnection", () => {
  stats.tls_handshakes++;
});
server.keepAliveTimeout = 120_000;
server.headersTimeout = 125_000;
server.requestTimeout = 0;
server.maxRequestsPerSocket = 0;
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`${JSON.stringify({ ready: true, port: server.address().port })}\n`);
});

// Stop when told to, and when the bench process dies (its end of the stdin pipe closes).
function stop() {
  server.closeAllConnections?.();
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 500).unref();
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
process.stdin.on("end", stop);
process.stdin.on("error", stop);
process.stdin.resume();
