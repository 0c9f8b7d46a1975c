// The load-generating side: one "target" per way of reaching the upstream.
//
//   direct     undici Agent straight to the upstream; sends the real key itself
//   keybroker  undici ProxyAgent to the broker (CONNECT, then TLS to the broker's minted
//              certificate, trusted through requestTls.ca); sends the placeholder
//
// A target counts every request it sends and every error it sees. checkRun() then compares
// those counts with the upstream's own (requests that arrived, carrying exactly the real key, and
// mismatches); a run that does not add up is an error, never a row in the table.
import { Agent, Pool, ProxyAgent } from "undici";
import { PLACEHOLDER, REAL_KEY, WILD_PLACEHOLDER } from "./broker.mjs";
import { nowMs, sleep } from "./stats.mjs";

const TIMEOUTS = { headersTimeout: 30_000, bodyTimeout: 60_000 };
const KEEP_ALIVE = { keepAliveTimeout: 60_000, keepAliveMaxTimeout: 600_000 };

/** A ~1 KB chat request body (JSON), optionally with extra fields for the fake upstream. */
export function chatBody(extra = {}) {
  const messages = [
    { role: "system", content: "You are a benchmark." },
    { role: "user", content: "" },
  ];
  const body = { model: "gpt-bench-1", temperature: 0, messages, ...extra };
  while (Buffer.byteLength(JSON.stringify(body)) < 1024) messages[1].content += "Lorem ipsum dolor sit. ";
  return JSON.stringify(body);
}
const CHAT_BODY = chatBody();

/** Resolves every name to 127.0.0.1 (the direct client dialling `*.bench.test`). */
function loopbackLookup(_host, options, callback) {
  if (options?.all) callback(null, [{ address: "127.0.0.1", family: 4 }]);
  else callback(null, "127.0.0.1", 4);
}

/**
 * @param name       "direct" or "keybroker"
 * @param upstream   {port, caPem}
 * @param broker     {proxyUrl, caPem, pid} for the keybroker target, absent for direct; with
 *                   `remote`, the load is generated elsewhere (inside an isolated launch,
 *                   bench/isolated.mjs) and `remote.load` runs it there
 */
export function makeTarget({ name, upstream, broker }) {
  const viaBroker = Boolean(broker);
  const target = {
    name,
    broker: broker ?? null,
    origin: `https://localhost:${upstream.port}`,
    sent: 0,
    errors: [],

    /** A new dispatcher: every scenario (and every "new connection" sample) takes its own. */
    dispatcher(extra = {}) {
      // The remote load generator keeps its own; closing this one makes it take a new one.
      if (broker?.remote) return { close: () => broker.remote.reset() };
      if (viaBroker) {
        return new ProxyAgent({
          uri: broker.proxyUrl,
          // The isolated variant: the proxy is a unix socket into the launch (bench/isolated.mjs).
          ...(broker.socketPath
            ? { clientFactory: (origin) => new Pool(origin, { socketPath: broker.socketPath }) }
            : {}),
          requestTls: { ca: broker.caPem },
          ...KEEP_ALIVE,
          ...TIMEOUTS,
          ...extra,
        });
      }
      return new Agent({
        connect: { ca: upstream.caPem, lookup: loopbackLookup },
        ...KEEP_ALIVE,
        ...TIMEOUTS,
        ...extra,
      });
    },

    /** Origin for a `*.bench.test` host: the broker maps :443 with `resolve`; direct dials the port. */
    wildOrigin(host) {
      return viaBroker ? `https://${host}` : `https://${host}:${upstream.port}`;
    },

    headers(wild = false) {
      const key = viaBroker ? (wild ? WILD_PLACEHOLDER : PLACEHOLDER) : REAL_KEY;
      return { "content-type": "application/json", authorization: `Bearer ${key}` };
    },

    noteError(where, err) {
      target.errors.push(`${where}: ${err?.code ?? ""} ${err?.message ?? err}`.trim());
    },

    /**
     * `conc` workers posting back to back for `seconds` on `d` (latencies pushed to `lat` if
     * given): {ok, seconds}, plus `client_cpu_s` when the load ran in another process.
     */
    load(d, conc, seconds, lat) {
      return broker?.remote
        ? broker.remote.load(target, conc, seconds, lat)
        : postFor(target, d, conc, seconds, lat);
    },

    /** POSTs the 1 KB chat body and reads the whole answer; throws unless it is a 200. */
    async post(dispatcher, origin = target.origin, wild = false) {
      target.sent++;
      const res = await dispatcher.request({
        origin,
        path: "/v1/chat/completions",
        method: "POST",
        headers: target.headers(wild),
        body: CHAT_BODY,
      });
      const text = await res.body.text();
      if (res.statusCode !== 200 || text.length < 1000) {
        throw new Error(`status ${res.statusCode}: ${text.slice(0, 200)}`);
      }
    },

    /** Starts an SSE request; returns the response (status checked) for the caller to read. */
    async openStream(dispatcher, fields) {
      target.sent++;
      const res = await dispatcher.request({
        origin: target.origin,
        path: "/v1/chat/completions",
        method: "POST",
        headers: target.headers(),
        body: chatBody({ stream: true, ...fields }),
      });
      if (res.statusCode !== 200) {
        const text = await res.body.text();
        throw new Error(`stream: status ${res.statusCode}: ${text.slice(0, 200)}`);
      }
      return res;
    },

    /** GETs /big?mb=N and counts the bytes; returns MiB/s. */
    async download(dispatcher, mb) {
      target.sent++;
      const t0 = performance.now();
      const res = await dispatcher.request({
        origin: target.origin,
        path: `/big?mb=${mb}`,
        method: "GET",
        headers: { authorization: target.headers().authorization },
      });
      let bytes = 0;
      for await (const chunk of res.body) bytes += chunk.length;
      const seconds = (performance.now() - t0) / 1000;
      if (res.statusCode !== 200 || bytes !== mb * 1024 * 1024) {
        throw new Error(`big: status ${res.statusCode}, ${bytes} bytes`);
      }
      return mb / seconds;
    },
  };
  return target;
}

/** The throughput loop: `conc` workers posting on `d` until `seconds` have passed. */
export async function postFor(target, d, conc, seconds, lat) {
  let ok = 0;
  const end = nowMs() + seconds * 1000;
  const worker = async () => {
    while (nowMs() < end) {
      const t = nowMs();
      try {
        await target.post(d);
        ok++;
        lat?.push(nowMs() - t);
      } catch (err) {
        target.noteError("throughput", err);
        await sleep(10); // no hot loop on a failing target; the run is invalid anyway
      }
    }
  };
  const t0 = nowMs();
  await Promise.all(Array.from({ length: conc }, worker));
  return { ok, seconds: (nowMs() - t0) / 1000 };
}

/** A side channel to the upstream's /__bench endpoints, always direct and never counted. */
export function makeControl(upstream) {
  // Kept alive across a whole step, so that reading the counters adds no TLS handshake of its own.
  const agent = new Agent({
    connect: { ca: upstream.caPem },
    keepAliveTimeout: 600_000,
    keepAliveMaxTimeout: 600_000,
  });
  const origin = `https://localhost:${upstream.port}`;
  const get = async (path) => {
    const res = await agent.request({ origin, path, method: "GET" });
    return JSON.parse(await res.body.text());
  };
  return {
    stats: (reset = false) => get(reset ? "/__bench/stats?reset=1" : "/__bench/stats"),
    clock: () => get("/__bench/clock"),
    close: () => agent.close(),
  };
}

export class InvalidRunError extends Error {}

/**
 * Checks one scenario run: the upstream saw exactly the requests the client sent, each with the
 * real key, and the client saw no errors. Throws InvalidRunError otherwise.
 */
export function checkRun(label, target, sentBefore, stats) {
  const sent = target.sent - sentBefore;
  const problems = [];
  if (stats.auth_mismatch !== 0) {
    problems.push(
      `${stats.auth_mismatch} request(s) reached the upstream without exactly the real key, e.g. ${JSON.stringify(stats.mismatch_samples)}`,
    );
  }
  if (stats.requests !== sent)
    problems.push(`the upstream saw ${stats.requests} requests, the client sent ${sent}`);
  if (stats.auth_ok !== sent) problems.push(`${stats.auth_ok} of ${sent} requests arrived with the real key`);
  if (target.errors.length) {
    problems.push(`${target.errors.length} client error(s): ${target.errors.slice(0, 5).join("; ")}`);
  }
  if (problems.length)
    throw new InvalidRunError(`invalid run (${label}, ${target.name}):\n  ${problems.join("\n  ")}`);
  return { requests: sent, auth_ok: stats.auth_ok, mismatches: stats.auth_mismatch };
}
