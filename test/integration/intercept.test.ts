// The core promise, end to end over real sockets and real TLS: the upstream gets the real key,
// the client only ever holds the placeholder, and a placeholder never leaves toward a host
// that is not its provider's.

import { once } from "node:events";
import { readFileSync } from "node:fs";
import { connect as netConnect } from "node:net";
import { Readable } from "node:stream";
import { connect as tlsConnect } from "node:tls";
import { type ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REAL_ANTHROPIC, REAL_GEMINI, REAL_GITHUB, REAL_OPENAI } from "../helpers/fixture.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";

/** Everything a raw socket receives until it emits `event`, as text. */
async function readUntil(socket: NodeJS.EventEmitter, event: "end" | "close"): Promise<string> {
  let text = "";
  socket.on("data", (d: Buffer) => {
    text += d.toString();
  });
  await once(socket, event);
  return text;
}

let f: InProcessFixture;
let agent: ProxyAgent;

beforeAll(async () => {
  f = await startInProcessFixture();
  agent = f.proxyAgent();
});

afterAll(async () => {
  await agent?.close();
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

function lastReceived() {
  return f.upstream.received.at(-1)!;
}

async function post(url: string, headers: Record<string, string>, body = '{"model":"gpt-test"}') {
  const res = await request(url, {
    method: "POST",
    dispatcher: agent,
    headers: { "content-type": "application/json", ...headers },
    body,
  });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

describe("intercepted HTTPS", () => {
  it("swaps the placeholder for the real key in the authorization header", async () => {
    const ph = await f.placeholder("openai");
    expect(ph).not.toContain(REAL_OPENAI);
    const before = f.upstream.received.length;
    const res = await post("https://api.openai.com/v1/chat/completions", { authorization: `Bearer ${ph}` });
    expect(res.status).toBe(200);
    expect(res.text).toContain("hello from upstream");
    expect(f.upstream.received.length).toBe(before + 1);
    const got = lastReceived();
    expect(got.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    expect(got.host).toBe("api.openai.com");
    expect(got.sni).toBe("api.openai.com");
    expect(JSON.stringify(got.rawHeaders)).not.toContain(ph);
  });

  it("injects into x-api-key for anthropic", async () => {
    const ph = await f.placeholder("anthropic");
    const res = await post("https://api.anthropic.com/v1/messages", {
      "x-api-key": ph,
      "anthropic-version": "2023-06-01",
    });
    expect(res.status).toBe(200);
    expect(lastReceived().headers["x-api-key"]).toBe(REAL_ANTHROPIC);
  });

  it("injects into a query parameter", async () => {
    const ph = await f.placeholder("gemini");
    const res = await request(
      `https://generativelanguage.googleapis.com/v1beta/models?key=${ph}&pageSize=5`,
      {
        dispatcher: agent,
      },
    );
    expect(res.statusCode).toBe(200);
    await res.body.text();
    const url = new URL(lastReceived().url, "https://x");
    expect(url.searchParams.get("key")).toBe(REAL_GEMINI);
    expect(url.searchParams.get("pageSize")).toBe("5");
  });

  it("injects inside Basic credentials", async () => {
    const ph = await f.placeholder("github");
    const basic = Buffer.from(`x-access-token:${ph}`).toString("base64");
    const res = await request("https://api.github.com/user", {
      dispatcher: agent,
      headers: { authorization: `Basic ${basic}` },
    });
    expect(res.statusCode).toBe(200);
    await res.body.text();
    const sent = String(lastReceived().headers.authorization);
    expect(Buffer.from(sent.slice(6), "base64").toString()).toBe(`x-access-token:${REAL_GITHUB}`);
  });

  it("forwards a request without a placeholder as is, adding no credential", async () => {
    const res = await post("https://api.openai.com/v1/chat/completions", {
      authorization: "Bearer sk-user-own",
    });
    expect(res.status).toBe(200);
    expect(lastReceived().headers.authorization).toBe("Bearer sk-user-own");
  });

  it("blocks a placeholder sent to another provider's host, and that host receives nothing", async () => {
    const ph = await f.placeholder("openai");
    const before = f.upstream.received.length;
    const res = await post("https://api.anthropic.com/v1/messages", { "x-api-key": ph });
    expect(res.status).toBe(403);
    expect(res.headers["x-keybroker-error"]).toBe("placeholder_host_mismatch");
    expect(JSON.parse(res.text).error.type).toBe("placeholder_host_mismatch");
    expect(f.upstream.received.length).toBe(before);
    expect(f.broker.stderr()).toContain("possible exfiltration blocked");
  });

  it("blocks a placeholder hidden in the URL of another provider's request", async () => {
    const ph = await f.placeholder("anthropic");
    const before = f.upstream.received.length;
    const res = await request(`https://api.openai.com/v1/models?leak=${ph}`, { dispatcher: agent });
    expect(res.statusCode).toBe(403);
    await res.body.text();
    expect(f.upstream.received.length).toBe(before);
  });

  it("applies a deny policy before anything is sent", async () => {
    const ph = await f.placeholder("github");
    const before = f.upstream.received.length;
    const basic = Buffer.from(`x-access-token:${ph}`).toString("base64");
    const res = await request("https://api.github.com/repos/acme/app", {
      method: "DELETE",
      dispatcher: agent,
      headers: { authorization: `Basic ${basic}` },
    });
    expect(res.statusCode).toBe(403);
    expect(res.headers["x-keybroker-error"]).toBe("policy_denied");
    await res.body.text();
    expect(f.upstream.received.length).toBe(before);
  });

  it("refuses a Host header that disagrees with the CONNECT target and SNI (421)", async () => {
    const ph = await f.placeholder("openai");
    const before = f.upstream.received.length;
    const socket = netConnect(f.broker.port, "127.0.0.1");
    await once(socket, "connect");
    socket.write("CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n");
    const [head] = (await once(socket, "data")) as [Buffer];
    expect(head.toString()).toMatch(/^HTTP\/1.1 200/);
    const tls = tlsConnect({
      socket,
      servername: "api.openai.com",
      ca: readFileSync(f.broker.caPath, "utf8"),
    });
    await once(tls, "secureConnect");
    tls.write(
      `GET /v1/models HTTP/1.1\r\nHost: api.anthropic.com\r\nAuthorization: Bearer ${ph}\r\nConnection: close\r\n\r\n`,
    );
    const answer = await readUntil(tls, "end");
    expect(answer).toMatch(/^HTTP\/1.1 421/);
    expect(answer).toContain("host_mismatch");
    expect(f.upstream.received.length).toBe(before);
    tls.destroy();
  });

  it("refuses an SNI that disagrees with the CONNECT target (421)", async () => {
    const before = f.upstream.received.length;
    const socket = netConnect(f.broker.port, "127.0.0.1");
    await once(socket, "connect");
    socket.write("CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n");
    await once(socket, "data");
    // The client ignores the name in our certificate, so only the SNI/Host check stands between.
    const tls = tlsConnect({ socket, servername: "evil.example", rejectUnauthorized: false });
    await once(tls, "secureConnect");
    tls.write("GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nConnection: close\r\n\r\n");
    const answer = await readUntil(tls, "end");
    expect(answer).toMatch(/^HTTP\/1.1 421/);
    expect(f.upstream.received.length).toBe(before);
    tls.destroy();
  });

  it("streams SSE: the first chunk reaches the client before the stream ends", async () => {
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    f.upstream.routes.set("POST /v1/stream", async (_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      res.write('data: {"seq":1}\n\n');
      await released;
      res.write('data: {"seq":2}\n\n');
      res.end("data: [DONE]\n\n");
    });
    const ph = await f.placeholder("openai");
    const res = await request("https://api.openai.com/v1/stream", {
      method: "POST",
      dispatcher: agent,
      headers: { authorization: `Bearer ${ph}` },
      body: "{}",
    });
    expect(res.statusCode).toBe(200);
    const it = res.body[Symbol.asyncIterator]();
    const first = await it.next();
    expect(String(first.value)).toContain('"seq":1');
    release();
    let rest = "";
    for (let n = await it.next(); !n.done; n = await it.next()) rest += String(n.value);
    expect(rest).toContain("[DONE]");
  });

  it("streams a 10 MiB upload: the upstream reads before the client has finished sending", async () => {
    const total = 10 * 1024 * 1024;
    let firstBytes!: () => void;
    const upstreamReading = new Promise<void>((r) => {
      firstBytes = r;
    });
    let receivedBytes = 0;
    f.upstream.streamingRoutes.set("POST /v1/files", (req, res) => {
      req.on("data", (c: Buffer) => {
        if (receivedBytes === 0) firstBytes();
        receivedBytes += c.length;
      });
      req.on("end", () => {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ bytes: receivedBytes }));
      });
    });
    const ph = await f.placeholder("openai");
    const chunk = Buffer.alloc(64 * 1024, 7);
    async function* body() {
      yield chunk;
      // The rest only flows once the upstream has seen the first bytes: a broker that
      // buffered the whole body would never get there and the test would time out.
      await upstreamReading;
      for (let sent = chunk.length; sent < total; sent += chunk.length) yield chunk;
    }
    const res = await request("https://api.openai.com/v1/files", {
      method: "POST",
      dispatcher: agent,
      headers: { authorization: `Bearer ${ph}`, "content-type": "application/octet-stream" },
      body: Readable.from(body()),
    });
    const text = await res.body.text();
    expect(res.statusCode, `${text}\n${f.broker.stderr()}`).toBe(200);
    expect(JSON.parse(text)).toEqual({ bytes: total });
    expect(f.upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
  });

  it("reuses its upstream connections: requests one after another, then 8 at a time", async () => {
    const ph = await f.placeholder("openai");
    const url = "https://api.openai.com/v1/chat/completions";
    const auth = { authorization: `Bearer ${ph}` };
    const client = f.proxyAgent();
    const send = async () => {
      const res = await request(url, {
        method: "POST",
        dispatcher: client,
        headers: { "content-type": "application/json", ...auth },
        body: '{"model":"gpt-test"}',
      });
      await res.body.text();
      expect(res.statusCode).toBe(200);
    };
    try {
      await send(); // may open the broker's connection to this upstream
      const before = f.upstream.connections;
      for (let i = 0; i < 30; i++) await send();
      expect(f.upstream.connections - before).toBe(0);
      const requests = f.upstream.received.length;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          for (let i = 0; i < 10; i++) await send();
        }),
      );
      expect(f.upstream.received.length - requests).toBe(80);
      // At most one new connection per request in flight, never one per request.
      expect(f.upstream.connections - before).toBeLessThanOrEqual(8);
    } finally {
      await client.close();
    }
  });

  it("aborts the upstream request when the client goes away", async () => {
    let upstreamClosed!: () => void;
    const closed = new Promise<void>((r) => {
      upstreamClosed = r;
    });
    f.upstream.streamingRoutes.set("GET /v1/forever", (_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: start\n\n");
      res.on("close", () => upstreamClosed());
    });
    const ac = new AbortController();
    const res = await request("https://api.openai.com/v1/forever", { dispatcher: agent, signal: ac.signal });
    const it = res.body[Symbol.asyncIterator]();
    await it.next();
    ac.abort();
    await closed;
  });

  it("keeps serving after a malformed request", async () => {
    const socket = netConnect(f.broker.port, "127.0.0.1");
    await once(socket, "connect");
    socket.write("GARBAGE \x01\x02 nonsense\r\n\r\n");
    const answer = await readUntil(socket, "close");
    expect(answer).toMatch(/^HTTP\/1.1 400/);
    const ph = await f.placeholder("openai");
    const res = await post("https://api.openai.com/v1/chat/completions", { authorization: `Bearer ${ph}` });
    expect(res.status).toBe(200);
  });

  it("answers oversized headers with 431 and keeps serving", async () => {
    const socket = netConnect(f.broker.port, "127.0.0.1");
    await once(socket, "connect");
    socket.write(
      `GET http://example.test/ HTTP/1.1\r\nHost: example.test\r\nX-Big: ${"a".repeat(70_000)}\r\n\r\n`,
    );
    const answer = await readUntil(socket, "close");
    expect(answer).toMatch(/^HTTP\/1.1 431/);
    const res = await post("https://api.openai.com/v1/chat/completions", { authorization: "Bearer x" });
    expect(res.status).toBe(200);
  });

  it("never injects into plain HTTP and refuses a placeholder sent there", async () => {
    const ph = await f.placeholder("openai");
    const socket = netConnect(f.broker.port, "127.0.0.1");
    await once(socket, "connect");
    socket.write(
      `GET http://api.openai.com/v1/models HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer ${ph}\r\nConnection: close\r\n\r\n`,
    );
    const answer = await readUntil(socket, "close");
    // Port 80 is not one of openai's hosts (they bind 443): the placeholder is bound elsewhere.
    expect(answer).toMatch(/^HTTP\/1.1 403/);
    expect(answer).toContain("placeholder_host_mismatch");
  });
});

describe("regressions from review", () => {
  it("matches deny policies on the normalized path: dot segments, escapes and double slashes", async () => {
    const ph = await f.placeholder("github");
    const basic = `Basic ${Buffer.from(`x-access-token:${ph}`).toString("base64")}`;
    const before = f.upstream.received.length;
    for (const path of ["/x/../repos/a/b", "/%72epos/a/b", "//repos/a/b"]) {
      const res = await request(`https://api.github.com${path}`, {
        method: "DELETE",
        dispatcher: agent,
        headers: { authorization: basic },
      });
      expect(res.statusCode, path).toBe(403);
      await res.body.text();
    }
    expect(f.upstream.received.length).toBe(before);
  });

  it("refuses a request with two Host headers (421)", async () => {
    const socket = netConnect(f.broker.port, "127.0.0.1");
    await once(socket, "connect");
    socket.write("CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n");
    await once(socket, "data");
    const tls = tlsConnect({
      socket,
      servername: "api.openai.com",
      ca: readFileSync(f.broker.caPath, "utf8"),
    });
    await once(tls, "secureConnect");
    tls.write(
      "GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
    );
    const answer = await readUntil(tls, "end");
    expect(answer).toMatch(/^HTTP\/1.1 421/);
    tls.destroy();
  });
});
