// docs/spec.md §3.3: every place a response can carry upstream text to the client is scrubbed. A fake
// upstream echoes the real key in each place (reason phrase, header name, trailers, 1xx
// answers, upgrade answers, text quoted in the broker's own errors), intercepted and in
// reverse mode; a raw client reads every byte the broker sent and none is the key.
import { once } from "node:events";
import type { IncomingMessage, ServerResponse } from "node:http";
import { connect as netConnect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REAL_OPENAI } from "../helpers/fixture.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { openTunnel } from "../helpers/tunnel.js";

const SECOND_KEY = "sk-real-leaky-second-5c7e9a1b3d5f7a9c1e3b";

let f: InProcessFixture;
let ph: string;

beforeAll(async () => {
  f = await startInProcessFixture({
    extraRules: `  leaky:
    mount: /p/leaky
    upstream: https://api.openai.com
    inject: { header: authorization }
    credentials: [OPENAI_API_KEY, LEAKY_KEY_2]
`,
    env: { LEAKY_KEY_2: SECOND_KEY },
  });
  ph = await f.placeholder("openai");
});
afterAll(async () => {
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

/** Everything the broker sends back on `socket` after `text`, up to the close. */
async function readAll(socket: Socket, text: string): Promise<string> {
  let answer = "";
  socket.setEncoding("utf8");
  socket.on("data", (d: string) => {
    answer += d;
  });
  socket.write(text);
  await once(socket, "close");
  return answer;
}

/** One raw request inside a CONNECT tunnel to `host`; returns every byte answered. */
async function intercepted(host: string, head: string): Promise<string> {
  const tls = await openTunnel(f.broker, host);
  return readAll(tls as unknown as Socket, head);
}

/** One raw request to the listener itself (reverse mode). */
async function reverse(head: string): Promise<string> {
  const socket = netConnect(f.broker.port, "127.0.0.1");
  await once(socket, "connect");
  return readAll(socket, head);
}

function post(path: string, host = "api.openai.com"): string {
  return `POST ${path} HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${ph}\r\nTE: trailers\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`;
}

function reversePost(path: string): string {
  return `POST /p/leaky${path} HTTP/1.1\r\nHost: 127.0.0.1:${f.broker.port}\r\nAuthorization: Bearer dummy\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`;
}

function keyOf(req: IncomingMessage): string {
  return String(req.headers.authorization ?? "").replace(/^Bearer /, "");
}

function expectClean(text: string): void {
  expect(text).not.toContain(REAL_OPENAI);
  expect(text).not.toContain(REAL_OPENAI.slice(8, 30));
  expect(text).not.toContain(SECOND_KEY.slice(8, 30));
}

describe("every place a response carries upstream text is scrubbed", () => {
  it("the reason phrase, streamed, held and long, intercepted and in reverse mode", async () => {
    for (const [status, size] of [
      [200, 10],
      [400, 10],
      [403, 10],
      [200, 200_000],
    ] as const) {
      f.upstream.routes.set("POST /reason", (req: IncomingMessage, res: ServerResponse) => {
        res.writeHead(status, `Bad key Bearer ${keyOf(req)}`, { "content-type": "text/plain" });
        res.end("x".repeat(size));
      });
      const text = await intercepted("api.openai.com", post("/reason"));
      expect(text.startsWith(`HTTP/1.1 ${status} Bad key Bearer ${ph}\r\n`), `${status}/${size}`).toBe(true);
      expectClean(text);
      const rev = await reverse(reversePost("/reason"));
      expect(rev.startsWith(`HTTP/1.1 ${status} Bad key Bearer `), `reverse ${status}/${size}`).toBe(true);
      expectClean(rev);
    }
  });

  it("a header name", async () => {
    f.upstream.routes.set("POST /header-name", (req: IncomingMessage, res: ServerResponse) => {
      res.writeHead(200, { [`x-key-${keyOf(req)}`]: "1", "content-type": "text/plain" });
      res.end("ok");
    });
    const text = await intercepted("api.openai.com", post("/header-name"));
    expect(text).toContain(`x-key-${ph}: 1`);
    expectClean(text);
    expectClean(await reverse(reversePost("/header-name")));
  });

  it("trailers", async () => {
    f.upstream.routes.set("POST /trailers", (req: IncomingMessage, res: ServerResponse) => {
      res.writeHead(200, { "content-type": "text/plain", trailer: "x-key" });
      res.write("body");
      res.addTrailers({ "x-key": keyOf(req), [`x-${keyOf(req)}`]: "1" });
      res.end();
    });
    const text = await intercepted("api.openai.com", post("/trailers"));
    expect(text).toContain("body");
    expectClean(text);
    expectClean(await reverse(reversePost("/trailers")));
  });

  it("1xx informational answers", async () => {
    f.upstream.routes.set("POST /early", (req: IncomingMessage, res: ServerResponse) => {
      const key = keyOf(req);
      res.socket!.write(
        `HTTP/1.1 103 Early key ${key}\r\nLink: </${key}>; rel=preload\r\nx-${key}: 1\r\n\r\n` +
          `HTTP/1.1 102 Processing ${key}\r\n\r\n`,
      );
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("final");
    });
    const text = await intercepted("api.openai.com", post("/early"));
    expect(text).toContain("final");
    expectClean(text);
    expectClean(await reverse(reversePost("/early")));
  });

  it("a refused upgrade's status line, header names and body", async () => {
    const upgrade = (path: string, host: string, auth: string) =>
      `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
      `Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n` +
      `Authorization: ${auth}\r\n\r\n`;
    const text = await intercepted(
      "api.openai.com",
      upgrade("/v1/realtime?refuse=2", "api.openai.com", `Bearer ${ph}`),
    );
    expect(text.startsWith(`HTTP/1.1 401 Bad key Bearer ${ph}\r\n`)).toBe(true);
    expectClean(text);
    const rev = await reverse(
      upgrade("/p/leaky/v1/realtime?refuse=2", `127.0.0.1:${f.broker.port}`, "Bearer dummy"),
    );
    expect(rev.startsWith("HTTP/1.1 401 Bad key Bearer ")).toBe(true);
    expectClean(rev);
  });

  it("the broker's own error quoting an upstream's content-encoding", async () => {
    f.upstream.routes.set("POST /coding", (req: IncomingMessage, res: ServerResponse) => {
      res.writeHead(200, { "content-encoding": `zstd, x-${keyOf(req)}`, "content-length": 4 });
      res.end("abcd");
    });
    const text = await intercepted("api.openai.com", post("/coding"));
    expect(text.startsWith("HTTP/1.1 502 ")).toBe(true);
    expect(text).toContain("content-encoding");
    expectClean(text);
    expectClean(await reverse(reversePost("/coding")));
  });

  // Last: it marks both credentials of the `leaky` provider.
  it("the error type of a quota answer, kept in the mark and quoted by pool_exhausted", async () => {
    f.upstream.routes.set("POST /quota", (req: IncomingMessage, res: ServerResponse) => {
      const body = JSON.stringify({ error: { type: `quota for ${keyOf(req)}`, message: "out" } });
      res.writeHead(429, { "content-type": "application/json", "retry-after": "600" });
      res.end(body);
    });
    const first = await reverse(reversePost("/quota"));
    expect(first.startsWith("HTTP/1.1 429 ")).toBe(true);
    expectClean(first);
    const second = await reverse(reversePost("/quota"));
    expect(second).toContain("pool_exhausted");
    expect(second).toContain("quota for ");
    expectClean(second);
    const status = await f.cli(["status", "--json"]);
    expectClean(status.stdout + status.stderr);
  });
});
