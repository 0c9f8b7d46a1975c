// The HTTP/1.1 server that reads intercepted connections (proxy/listener/h1-server.ts,
// decision 189), on plain sockets on 127.0.0.1: a raw client writes requests byte for byte and
// reads what comes back; node's own server stands behind it for what it hands over.
import { once } from "node:events";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import type { H1Response } from "../../../proxy/listener/h1-response.js";
import { H1_SERVER_AVAILABLE, H1Server } from "../../../proxy/listener/h1-server.js";
import { spyParserInitialize } from "../../helpers/parser-spy.js";

type Handler = (req: IncomingMessage, res: H1Response) => void;

const stops: (() => void)[] = [];
afterEach(() => {
  for (const stop of stops.splice(0)) stop();
});

interface Setup {
  port: number;
  server: H1Server;
  /** Requests node's server got, each as `METHOD url body`. */
  fallbackSaw: string[];
}

/** A listener whose connections `H1Server` serves, with node's server behind it. */
async function setup(
  handler: Handler,
  opts: {
    headersMs?: number;
    keepAliveMs?: number;
    fallback?: (req: IncomingMessage, res: ServerResponse) => void;
  } = {},
): Promise<Setup> {
  const fallbackSaw: string[] = [];
  const fallback: Server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on("data", (d: Buffer) => parts.push(d));
    req.on("end", () => {
      fallbackSaw.push(`${req.method} ${req.url} ${Buffer.concat(parts).toString()}`);
      if (opts.fallback) opts.fallback(req, res);
      else res.end(`node:${req.method}`);
    });
  });
  fallback.on("upgrade", (req: IncomingMessage, socket: net.Socket) => {
    fallbackSaw.push(`UPGRADE ${req.url} ${String(req.headers.upgrade)}`);
    socket.end("HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: test\r\n\r\nswitched");
  });
  const server = new H1Server({
    fallback,
    headersMs: () => opts.headersMs ?? 60_000,
    keepAliveMs: () => opts.keepAliveMs ?? 60_000,
    onRequest: handler,
  });
  const sockets = new Set<net.Socket>();
  const listener = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    server.serve(socket);
  });
  listener.listen(0, "127.0.0.1");
  await once(listener, "listening");
  stops.push(() => {
    server.close();
    listener.close();
    for (const s of sockets) s.destroy();
  });
  return { port: (listener.address() as net.AddressInfo).port, server, fallbackSaw };
}

/** A raw client: what it has read so far, and when the server closed. */
async function client(port: number) {
  const socket = net.connect(port, "127.0.0.1");
  await once(socket, "connect");
  let got = Buffer.alloc(0);
  const waiters: (() => void)[] = [];
  socket.on("data", (d: Buffer) => {
    got = Buffer.concat([got, d]);
    for (const w of waiters.splice(0)) w();
  });
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.on("error", () => {});
  stops.push(() => socket.destroy());
  return {
    socket,
    closed,
    text: () => got.toString("latin1"),
    /** Resolves once what was read contains `s` (count times). */
    async until(s: string, count = 1): Promise<string> {
      for (;;) {
        const t = got.toString("latin1");
        if (t.split(s).length - 1 >= count) return t;
        await new Promise<void>((resolve) => {
          waiters.push(resolve);
          socket.once("close", resolve);
        });
        if (socket.destroyed && got.toString("latin1").split(s).length - 1 < count)
          throw new Error(
            `closed before ${JSON.stringify(s)} came; got ${JSON.stringify(got.toString("latin1"))}`,
          );
      }
    },
  };
}

/** Reads a request body whole. */
function body(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on("data", (d: Buffer) => parts.push(d));
    req.on("end", () => resolve(Buffer.concat(parts).toString()));
    req.on("error", reject);
  });
}

describe.runIf(H1_SERVER_AVAILABLE)("the intercepted connections' HTTP/1.1 server", () => {
  it("serves keep-alive requests with bodies, answering with a length or chunked", async () => {
    const seen: string[] = [];
    const { port, fallbackSaw } = await setup(async (req, res) => {
      const b = await body(req);
      seen.push(`${req.method} ${req.url} ${req.headers["x-a"]} ${b}`);
      if (req.url === "/whole") {
        res.writeHead(201, { "x-b": "1" });
        res.end(Buffer.from(`echo:${b}`));
      } else {
        res.writeHead(200, "Fine", { "content-type": "text/plain" });
        res.write(Buffer.from("one,"));
        res.write(Buffer.from("two"));
        res.addTrailers({ "x-t": "done" });
        res.end();
      }
    });
    const c = await client(port);
    c.socket.write("POST /whole HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nX-A: 2\r\nContent-Length: 5\r\n\r\nhel");
    await new Promise((r) => setTimeout(r, 20));
    c.socket.write("lo");
    const first = await c.until("echo:hello");
    expect(first).toMatch(/^HTTP\/1\.1 201 Created\r\n/);
    expect(first).toMatch(/\r\nx-b: 1\r\n/);
    expect(first).toMatch(/\r\nDate: .+ GMT\r\n/);
    expect(first).toMatch(/\r\nConnection: keep-alive\r\nKeep-Alive: timeout=60\r\n/);
    expect(first).toMatch(/\r\nContent-Length: 10\r\n\r\necho:hello$/);
    c.socket.write("GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
    const all = await c.until("x-t: done\r\n\r\n");
    const second = all.slice(first.length);
    expect(second).toMatch(/^HTTP\/1\.1 200 Fine\r\n/);
    expect(second).toContain(
      "\r\nTransfer-Encoding: chunked\r\n\r\n4\r\none,\r\n3\r\ntwo\r\n0\r\nx-t: done\r\n\r\n",
    );
    expect(seen).toEqual(["POST /whole 1, 2 hello", "GET /stream undefined "]);
    expect(fallbackSaw).toEqual([]);
  });

  it("hands a request on with the body bytes that came with its head already in it", async () => {
    // What the handler finds when it is called, before it reads anything (decision 190).
    const found: string[] = [];
    const { port } = await setup((req, res) => {
      const r = req as IncomingMessage & { readableLength: number };
      found.push(`${req.url} complete=${req.complete} buffered=${r.readableLength}`);
      void body(req).then((b) => res.end(`${req.url}=${b};`));
    });
    const c = await client(port);
    // Head and whole body in one read; then a head with half its body, the rest later.
    c.socket.write("POST /whole HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello");
    await c.until("/whole=hello;");
    c.socket.write("POST /half HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n\r\nabc");
    await new Promise((r) => setTimeout(r, 20));
    c.socket.write("def");
    await c.until("/half=abcdef;");
    expect(found).toEqual(["/whole complete=true buffered=5", "/half complete=false buffered=3"]);
  });

  it("answers pipelined requests in order, starting each once the one before is answered", async () => {
    const started: string[] = [];
    const { port } = await setup((req, res) => {
      started.push(req.url!);
      void body(req).then((b) => {
        // The first answer is late: the second request must not start before it is out.
        setTimeout(
          () => {
            expect(started.at(-1)).toBe(req.url);
            res.end(`${req.url}=${b};`);
          },
          req.url === "/1" ? 50 : 0,
        );
      });
    });
    const c = await client(port);
    c.socket.write(
      "POST /1 HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\naPOST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nbbGET /3 HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    const text = await c.until("/3=;");
    expect(text.indexOf("/1=a;")).toBeLessThan(text.indexOf("/2=bb;"));
    expect(text.indexOf("/2=bb;")).toBeLessThan(text.indexOf("/3=;"));
    expect(started).toEqual(["/1", "/2", "/3"]);
  });

  it("hands node's server what it does not serve, from the first byte of that request", async () => {
    const cases: [string, string][] = [
      [
        "POST /chunked HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        "POST /chunked abc",
      ],
      [
        "POST /expect HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nxy",
        "POST /expect xy",
      ],
      ["GET /old HTTP/1.0\r\nHost: a\r\n\r\n", "GET /old "],
      ["GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n", "UPGRADE /ws test"],
    ];
    for (const [request, saw] of cases)
      for (const whole of [false, true]) {
        let served = 0;
        const { port, fallbackSaw } = await setup((req, res) => {
          served++;
          void body(req).then(() => res.end("mine"));
        });
        const c = await client(port);
        // One request of its own first: the hand-over happens in the middle of the connection,
        // with the request whole or split across reads.
        c.socket.write("GET /first HTTP/1.1\r\nHost: a\r\n\r\n");
        await c.until("mine");
        // Whole, its head is parsed alone (decision 204): the body behind it goes over too.
        if (whole) c.socket.write(request);
        else {
          c.socket.write(request.slice(0, 10));
          await new Promise((r) => setTimeout(r, 20));
          c.socket.write(request.slice(10));
        }
        await c.until(saw.startsWith("UPGRADE") ? "switched" : "node:");
        expect(fallbackSaw).toEqual([saw]);
        expect(served).toBe(1);
      }
  });

  it("lets node's server answer a head its parser refuses", async () => {
    const { port, fallbackSaw } = await setup(() => {
      throw new Error("not a request");
    });
    const c = await client(port);
    c.socket.write("GET / HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n");
    await c.closed;
    expect(c.text()).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(fallbackSaw).toEqual([]);
  });

  it("refuses a header that would split the head, and reports bad status codes", async () => {
    const errors: string[] = [];
    const { port } = await setup((_req, res) => {
      for (const bad of [
        () => res.writeHead(200, { "x-a": "1\r\nx-injected: 1" }),
        () => res.writeHead(200, { "x-a": "\u010d\u010a" }),
        () => res.writeHead(200, { "x a": "1" }),
        () => res.writeHead(200, "OK\r\nx-injected: 1", {}),
        () => res.writeHead(99),
      ]) {
        try {
          bad();
        } catch (err) {
          errors.push((err as { code: string }).code);
        }
      }
      res.writeHead(200, { "x-ok": ["a", "b"] });
      res.end("fine");
    });
    const c = await client(port);
    c.socket.write("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    const text = await c.until("fine");
    expect(errors).toEqual([
      "ERR_INVALID_CHAR",
      "ERR_INVALID_CHAR",
      "ERR_INVALID_CHAR",
      "ERR_INVALID_CHAR",
      "ERR_HTTP_INVALID_STATUS_CODE",
    ]);
    expect(text).toContain("\r\nx-ok: a\r\nx-ok: b\r\n");
    expect(text).not.toContain("injected");
  });

  it("cuts the connection rather than send more or fewer bytes than the head declared", async () => {
    for (const [declared, sent] of [
      [3, "toolong"],
      [10, "short"],
    ] as const) {
      const { port } = await setup((_req, res) => {
        res.writeHead(200, { "content-length": String(declared) });
        res.end(Buffer.from(sent));
      });
      const c = await client(port);
      c.socket.write("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
      await c.closed;
      expect(c.text()).not.toContain(sent);
    }
  });

  it("sends no body for HEAD, 204 and 304", async () => {
    const { port } = await setup((req, res) => {
      res.writeHead(req.url === "/head" ? 200 : Number(req.url!.slice(1)));
      res.end(Buffer.from("body-that-must-not-go"));
    });
    const c = await client(port);
    c.socket.write(
      "HEAD /head HTTP/1.1\r\nHost: a\r\n\r\nGET /204 HTTP/1.1\r\nHost: a\r\n\r\nGET /304 HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    const text = await c.until("HTTP/1.1 304");
    await new Promise((r) => setTimeout(r, 50));
    expect(c.text()).not.toContain("body-that-must-not-go");
    expect(text.match(/HTTP\/1\.1 /g)).toHaveLength(3);
  });

  it("answers a late head with 408 and closes an idle connection", async () => {
    const { port } = await setup((_req, res) => res.end("x"), { headersMs: 200, keepAliveMs: 300 });
    const late = await client(port);
    late.socket.write("GET / HTTP/1.1\r\nHost:");
    await late.closed;
    expect(late.text()).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    const idle = await client(port);
    idle.socket.write("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    await idle.until("\r\n\r\nx");
    const answered = Date.now();
    await idle.closed;
    expect(idle.text()).not.toContain("408");
    expect(Date.now() - answered).toBeGreaterThanOrEqual(250);
  });

  it("tells the request and the answer when the client goes away", async () => {
    let events: string[] = [];
    const gone = new Promise<void>((resolve) => {
      void setup((req, res) => {
        req.on("error", () => {});
        req.on("aborted", () => events.push("aborted"));
        res.once("close", () => {
          events.push(`close ${res.writableFinished}`);
          resolve();
        });
      }).then(async ({ port }) => {
        const c = await client(port);
        c.socket.write("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc");
        await new Promise((r) => setTimeout(r, 30));
        c.socket.destroy();
      });
    });
    await gone;
    expect(events).toEqual(["aborted", "close false"]);
    events = [];
  });

  it("reads and drops a body nobody read once the answer is out, and serves the next request", async () => {
    const big = "z".repeat(300_000);
    const { port } = await setup((req, res) => {
      if (req.url === "/refuse") res.end("refused");
      else void body(req).then((b) => res.end(`got ${b.length}`));
    });
    const c = await client(port);
    c.socket.write(`POST /refuse HTTP/1.1\r\nHost: a\r\nContent-Length: ${big.length}\r\n\r\n`);
    await c.until("refused");
    c.socket.write(big);
    c.socket.write(`POST /next HTTP/1.1\r\nHost: a\r\nContent-Length: ${big.length}\r\n\r\n${big}`);
    await c.until(`got ${big.length}`);
  });

  it("passes a large body through with backpressure, every byte in order", async () => {
    const size = 4 * 1024 * 1024;
    const { port } = await setup((req, res) => {
      let n = 0;
      let sum = 0;
      req.pause();
      // A slow reader: the socket must stop and start again under it.
      const tick = setInterval(() => {
        let d: Buffer | null = req.read() as Buffer | null;
        while (d !== null) {
          for (const b of d) sum = (sum + b * (++n % 7)) % 1_000_000_007;
          d = req.read() as Buffer | null;
        }
      }, 5);
      req.on("end", () => {
        clearInterval(tick);
        res.end(`${n}:${sum}`);
      });
    });
    const data = Buffer.alloc(size);
    let expected = 0;
    for (let i = 0; i < size; i++) {
      data[i] = (i * 31) & 0xff;
      expected = (expected + data[i]! * ((i + 1) % 7)) % 1_000_000_007;
    }
    const c = await client(port);
    c.socket.write(`PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: ${size}\r\n\r\n`);
    c.socket.write(data);
    await c.until(`${size}:${expected}`);
  });
});

// What a security review of the first version found (decision 189), one test each.
describe.runIf(H1_SERVER_AVAILABLE)("the HTTP/1.1 server, after its review", () => {
  it("refuses a malformed or oversized head that comes after a request it served", async () => {
    for (const [bad, status] of [
      ["GET / HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n", "400"],
      ["POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", "400"],
      [`GET / HTTP/1.1\r\nHost: a\r\nX-Big: ${"b".repeat(40_000)}\r\n\r\n`, "431"],
    ] as const) {
      const { port } = await setup((_req, res) => res.end("mine"));
      const c = await client(port);
      c.socket.write("GET /first HTTP/1.1\r\nHost: a\r\n\r\n");
      await c.until("mine");
      c.socket.write(bad);
      await c.closed;
      expect(c.text().slice(c.text().indexOf("mine") + 4)).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
    }
  });

  it("serves requests whose heads come whole or cut anywhere, and refuses an oversized head after either", async () => {
    const request = "POST /r HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
    const end = request.indexOf("\r\n\r\n");
    // Whole, the body cut, the head cut early, at each byte of its blank line, and last in the
    // blank line: the head that ends in the second piece stops the parser as an upgrade does.
    const cuts = [0, request.length - 2, 5, end + 4, end + 1, end + 3, end + 2];
    const { port } = await setup(async (req, res) => res.end(`got ${await body(req)};`));
    const c = await client(port);
    for (const [i, cut] of cuts.entries()) {
      if (cut === 0) c.socket.write(request);
      else {
        c.socket.write(request.slice(0, cut));
        await new Promise((r) => setTimeout(r, 15));
        c.socket.write(request.slice(cut));
      }
      await c.until("got hello;", i + 1);
    }
    c.socket.write(`GET / HTTP/1.1\r\nHost: a\r\nX-Big: ${"b".repeat(40_000)}\r\n\r\n`);
    await c.closed;
    expect(c.text().slice(c.text().lastIndexOf("got hello;") + 10)).toMatch(/^HTTP\/1\.1 431 /);
  });

  it("parses a head that comes whole on the parser it has, and gives one that came in pieces a fresh one", async () => {
    // Initializing node's parser costs more than the rest of a request's parse (decision 204).
    const spy = spyParserInitialize();
    stops.push(spy.restore);
    const { port } = await setup(async (req, res) => res.end(`got ${await body(req)};`));
    const c = await client(port);
    const request = "POST /r HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nok";
    for (let i = 1; i <= 10; i++) {
      c.socket.write(request);
      await c.until("got ok;", i);
    }
    expect(spy.calls()).toBe(1);
    c.socket.write(request.slice(0, 20));
    await new Promise((r) => setTimeout(r, 15));
    c.socket.write(request.slice(20));
    await c.until("got ok;", 11);
    expect(spy.calls()).toBe(2);
    c.socket.write(request + request);
    await c.until("got ok;", 13);
    expect(spy.calls()).toBe(2);
  });

  it("keeps a bounded part of a head llhttp does not count (blank lines, spaces) and refuses the rest", async () => {
    const { port } = await setup((_req, res) => res.end("mine"));
    const c = await client(port);
    const flood = "\r\n".repeat(64 * 1024);
    for (let i = 0; i < 8 && !c.socket.destroyed; i++) {
      c.socket.write(flood);
      await new Promise((r) => setTimeout(r, 5));
    }
    await c.closed;
    expect(c.text()).toMatch(/^HTTP\/1\.1 431 /);
  });

  it("leaves the connection alone when an answer that is out is destroyed late", async () => {
    let first: H1Response | undefined;
    const { port } = await setup((req, res) => {
      if (req.url === "/a") {
        first = res;
        res.end("A-done;");
        return;
      }
      res.writeHead(200);
      res.write(Buffer.from("B-part;"));
      // The first answer's late destroy (a throw after it finished) must not cut this one.
      setTimeout(() => {
        first?.destroy();
        res.end(Buffer.from("B-end;"));
      }, 20);
    });
    const c = await client(port);
    c.socket.write("GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n");
    await c.until("B-end;");
    expect(first?.destroyed).toBe(true);
  });

  it("does not close as idle a connection whose client is still sending a body after an early answer", async () => {
    const { port } = await setup((_req, res) => res.end("early"), { headersMs: 400, keepAliveMs: 300 });
    const c = await client(port);
    c.socket.write("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 20\r\n\r\n");
    await c.until("early");
    for (let i = 0; i < 10; i++) {
      await new Promise((r) => setTimeout(r, 60));
      expect(c.socket.destroyed).toBe(false);
      c.socket.write("xx");
    }
    c.socket.write("GET /next HTTP/1.1\r\nHost: a\r\n\r\n");
    await c.until("early", 2);
  });

  it("refuses a head whose framing would not match its body, and interim statuses", async () => {
    const errors: string[] = [];
    const { port } = await setup((_req, res) => {
      for (const bad of [
        () => res.writeHead(200, { "content-length": "abc" }),
        () => res.writeHead(200, { "content-length": ["2", "9"] } as never),
        () => res.writeHead(200, { "content-length": "2", "transfer-encoding": "chunked" }),
        () => res.writeHead(103, { link: "</a>" }),
      ]) {
        try {
          bad();
        } catch (err) {
          errors.push((err as { code: string }).code);
        }
      }
      res.writeHead(200, { "transfer-encoding": "gzip" });
      res.end(Buffer.from("zz"));
    });
    const c = await client(port);
    c.socket.write("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    await c.closed;
    expect(errors).toEqual([
      "ERR_HTTP_INVALID_HEADER_VALUE",
      "ERR_HTTP_INVALID_HEADER_VALUE",
      "ERR_HTTP_INVALID_HEADER_VALUE",
      "ERR_HTTP_INVALID_STATUS_CODE",
    ]);
    // A body in a coding that is not chunked ends with the connection, and the head says so.
    expect(c.text()).toMatch(/\r\nConnection: close\r\n\r\nzz$/);
  });
});
