// docs/spec.md §3.8: every stage of a client connection has a timeout, in tunnels as on the listener.
// The cap on open connections is test/integration/connection-cap.test.ts.
// The timeouts are set small in the rule file; close times are checked against generous bounds.
import { once } from "node:events";
import { readFileSync } from "node:fs";
import type { Socket } from "node:net";
import { type TLSSocket, connect as tlsConnect } from "node:tls";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import {
  brokerError,
  connectThrough,
  openSocket,
  openTunnel,
  parseAnswer,
  untilClosed,
} from "../helpers/raw.js";

// The handshake's timeout is the shortest, so a close before the headers timeout is its doing.
const HANDSHAKE_MS = 300;
const HEADERS_MS = 1200;
const KEEP_ALIVE_MS = 400;
const TUNNEL_IDLE_MS = 700;
/** The longest a close may take past its timeout on a loaded machine. */
const SLACK_MS = 4000;
const SLOW_KEY = "sk-real-slowapi-0c9e8a7b6d5f4e3d2c1b0a99";

/** Writes one byte of `text` every `everyMs` until the socket closes. */
function trickle(socket: { write(s: string): boolean; destroyed: boolean }, text: string, everyMs = 100) {
  let i = 0;
  const timer = setInterval(() => {
    if (socket.destroyed || i >= text.length) clearInterval(timer);
    else socket.write(text[i++]!);
  }, everyMs);
}

function expectClosedAfter(afterMs: number, timeoutMs: number, slackMs = SLACK_MS): void {
  // The timeout runs from a moment a little before the test's own clock started.
  expect(afterMs).toBeGreaterThanOrEqual(timeoutMs - 100);
  expect(afterMs).toBeLessThan(timeoutMs + slackMs);
}

/** Trickles `text` a byte at a time: the broker answers 408 and closes at timeouts.headers. */
async function expectTrickled408(socket: Socket | TLSSocket, text: string): Promise<void> {
  const closed = untilClosed(socket);
  trickle(socket, text);
  const { text: answer, afterMs } = await closed;
  expectClosedAfter(afterMs, HEADERS_MS);
  expect(brokerError(answer)).toMatchObject({ status: 408, code: "request_timeout" });
}

/** Sends one keep-alive request: once answered, the idle connection closes at timeouts.keep_alive. */
async function expectKeepAliveClose(socket: Socket | TLSSocket, request: string): Promise<void> {
  socket.write(request);
  const [first] = (await once(socket, "data")) as [Buffer];
  const answered = performance.now();
  expect(parseAnswer(first.toString()).status).toBe(200);
  expectClosedAfter((await untilClosed(socket, answered)).afterMs, KEEP_ALIVE_MS);
}

describe("timeouts at every stage", () => {
  let f: InProcessFixture;

  beforeAll(async () => {
    f = await startInProcessFixture({
      env: { SLOW_API_KEY: SLOW_KEY },
      extraRules: `  slow:
    hosts: [tunnel.test]
    credentials: [SLOW_API_KEY]
    placeholder: { value: "slow-placeholder-123" }
    timeout: 700ms
timeouts: { handshake: ${HANDSHAKE_MS}ms, headers: ${HEADERS_MS}ms, keep_alive: ${KEEP_ALIVE_MS}ms, tunnel_idle: ${TUNNEL_IDLE_MS}ms, upstream: 20s }
`,
    });
  });

  afterAll(async () => {
    await f?.close();
    expect(f.leaks()).toEqual([]);
  });

  it("listener: headers trickled a byte at a time get 408 at timeouts.headers", async () => {
    await expectTrickled408(
      await openSocket(f.broker.port),
      "GET http://example.test/ HTTP/1.1\r\nHost: example.test\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa",
    );
  });

  it("listener: a connection that sends nothing is closed at timeouts.headers", async () => {
    const socket = await openSocket(f.broker.port);
    expectClosedAfter((await untilClosed(socket)).afterMs, HEADERS_MS);
  });

  it("listener: an idle keep-alive connection is closed at timeouts.keep_alive", async () => {
    await expectKeepAliveClose(
      await openSocket(f.broker.port),
      "GET /__keybroker/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    );
  });

  it("tunnel: a CONNECT that never sends a ClientHello is closed at timeouts.handshake", async () => {
    const socket = await connectThrough(f.broker.port, "api.openai.com:443");
    const { text, afterMs } = await untilClosed(socket);
    expect(text).toBe("");
    expectClosedAfter(afterMs, HANDSHAKE_MS, HEADERS_MS - HANDSHAKE_MS - 100);
  });

  it("tunnel: a handshake that stalls halfway is closed at timeouts.handshake", async () => {
    const socket = await connectThrough(f.broker.port, "api.openai.com:443");
    const closed = untilClosed(socket);
    // The first bytes of a TLS record carrying a ClientHello, and then nothing.
    socket.write(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]));
    expectClosedAfter((await closed).afterMs, HANDSHAKE_MS, HEADERS_MS - HANDSHAKE_MS - 100);
  });

  it("tunnel: a connection that sends no request is closed at timeouts.headers", async () => {
    const tls = await openTunnel(f.broker.port, "api.openai.com", f.broker.caPath);
    const { text, afterMs } = await untilClosed(tls);
    expectClosedAfter(afterMs, HEADERS_MS);
    expect(brokerError(text)).toMatchObject({ status: 408, code: "request_timeout" });
  });

  it("tunnel: headers trickled a byte at a time get 408 at timeouts.headers", async () => {
    await expectTrickled408(
      await openTunnel(f.broker.port, "api.openai.com", f.broker.caPath),
      "GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    );
  });

  it("tunnel: an idle keep-alive connection is closed at timeouts.keep_alive", async () => {
    await expectKeepAliveClose(
      await openTunnel(f.broker.port, "api.openai.com", f.broker.caPath),
      "GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\n\r\n",
    );
  });

  it("plain tunnel (no rule names the host): closed after timeouts.tunnel_idle without traffic", async () => {
    const socket = await connectThrough(f.broker.port, "evil.example:443");
    const { text, afterMs } = await untilClosed(socket);
    expect(text).toBe("");
    expectClosedAfter(afterMs, TUNNEL_IDLE_MS);
  });

  it("plain tunnel: traffic either way keeps it open past timeouts.tunnel_idle", async () => {
    const socket = await connectThrough(f.broker.port, "evil.example:443");
    // TLS with the upstream itself, through the tunnel: the broker sees only bytes.
    const tls = tlsConnect({
      socket,
      servername: "evil.example",
      ca: readFileSync(f.upstream.caPath, "utf8"),
    });
    tls.on("error", () => {});
    await once(tls, "secureConnect");
    const opened = performance.now();
    // Requests spaced at half the idle timeout, for more than twice its length.
    for (let i = 0; i < 5; i++) {
      await new Promise((r) => setTimeout(r, TUNNEL_IDLE_MS / 2));
      tls.write("GET /v1/models HTTP/1.1\r\nHost: evil.example\r\n\r\n");
      const [answer] = (await once(tls, "data")) as [Buffer];
      expect(parseAnswer(answer.toString()).status).toBeGreaterThan(0);
    }
    expect(performance.now() - opened).toBeGreaterThan(2 * TUNNEL_IDLE_MS);
    const answered = performance.now();
    expectClosedAfter((await untilClosed(tls, answered)).afterMs, TUNNEL_IDLE_MS);
  });

  it("a provider's timeout answers 504 upstream_timeout; timeouts.upstream applies to the others", async () => {
    f.upstream.routes.set("GET /v1/late", async (_req, res) => {
      await new Promise((r) => setTimeout(r, 1500));
      res.writeHead(200, { "content-type": "application/json" });
      res.end('{"late":true}');
    });
    const agent = f.proxyAgent();
    try {
      const started = performance.now();
      const slow = await request("https://tunnel.test/v1/late", {
        dispatcher: agent,
        headers: { authorization: "Bearer slow-placeholder-123" },
      });
      const afterMs = performance.now() - started;
      expect(slow.statusCode).toBe(504);
      expect(slow.headers["x-keybroker-error"]).toBe("upstream_timeout");
      expect(((await slow.body.json()) as { error: { provider: string } }).error.provider).toBe("slow");
      expect(afterMs).toBeGreaterThanOrEqual(600);
      const ph = await f.placeholder("openai");
      const other = await request("https://api.openai.com/v1/late", {
        dispatcher: agent,
        headers: { authorization: `Bearer ${ph}` },
      });
      expect(other.statusCode).toBe(200);
      expect(await other.body.text()).toBe('{"late":true}');
    } finally {
      await agent.close();
    }
  });
});
