// The interception engine on real sockets: a TLS socket (and OpenSSL's buffers) only for a
// client that starts TLS, and the memory a surge of connections grew is given back once it
// closed (docs/reliability.md, "Connections: timeouts, caps, floods"; decision 55).
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { createServer as createH2Server } from "node:http2";
import { type AddressInfo, connect as netConnect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Duplex } from "node:stream";
import { connect as tlsConnect } from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type CertificateAuthority, loadOrCreateCa } from "../../../certs/ca.js";
import { LeafMinter } from "../../../certs/leaf.js";
import { releaseAfterSurges } from "../../../proxy/listener/connection-limits.js";
import { CONNECT_OK, intercept, OFFER_H1 } from "../../../proxy/listener/engine.js";

const HOST = "api.example.test";
let home: string;
let ca: CertificateAuthority;
let outer: Server;
let inner: Server;
let port: number;
/** Connections the listener has open (its own count, as for `limits.connections`). */
const open = new Set<Socket>();
/** TLS sockets handed to the internal server: one per client that started TLS. */
let handedOver = 0;

beforeAll(async () => {
  home = mkdtempSync(join(tmpdir(), "kb-engine-"));
  ca = loadOrCreateCa(home);
  const minter = new LeafMinter(ca);
  inner = createServer((_req, res) => res.end("inside"));
  inner.on("connection", () => handedOver++);
  outer = createServer();
  outer.on("connection", (socket: Socket) => {
    open.add(socket);
    socket.once("close", () => open.delete(socket));
  });
  outer.on("connect", (_req, socket: Socket, head: Buffer) => {
    socket.on("error", () => socket.destroy());
    const servers = {
      http: (s: Socket) => inner.emit("connection", s),
      h2: createH2Server(),
      alpn: () => OFFER_H1,
    };
    intercept(socket, head, { host: HOST, port: 443, client: "default" }, minter, servers, 60_000);
  });
  outer.listen(0, "127.0.0.1");
  await once(outer, "listening");
  port = (outer.address() as AddressInfo).port;
});

afterAll(() => {
  outer.closeAllConnections();
  outer.close();
  rmSync(home, { recursive: true, force: true });
});

/** Sends a CONNECT by hand and resolves once its 200 has arrived. */
async function connectOnly(): Promise<Socket> {
  const socket = netConnect(port, "127.0.0.1");
  socket.on("error", () => {});
  await once(socket, "connect");
  socket.write(`CONNECT ${HOST}:443 HTTP/1.1\r\nHost: ${HOST}:443\r\n\r\n`);
  const [chunk] = (await once(socket, "data")) as [Buffer];
  expect(chunk.toString("latin1")).toMatch(/^HTTP\/1\.1 200 /);
  return socket;
}

/** Resolves once the listener has none of its connections open. */
async function allClosed(): Promise<void> {
  // Not once(): a socket torn down under a TLS socket may emit an error before it closes.
  while (open.size > 0) await new Promise((resolve) => [...open][0]!.once("close", resolve));
}

describe("intercept", () => {
  it("makes no TLS socket for CONNECTs whose client leaves before its first byte", async () => {
    const before = handedOver;
    const flood = await Promise.all(Array.from({ length: 200 }, connectOnly));
    expect(open.size).toBe(200);
    // Some leave with a FIN, some with a reset: neither may start OpenSSL's handshake.
    for (const [i, s] of flood.entries()) {
      if (i % 2 === 0) s.end();
      else s.resetAndDestroy();
    }
    await allClosed();
    expect(handedOver - before).toBe(0);
  });

  it("terminates TLS for a client that sends a ClientHello, and serves its requests", async () => {
    const before = handedOver;
    const socket = await connectOnly();
    const tls = tlsConnect({ socket, servername: HOST, ca: ca.certPem });
    await once(tls, "secureConnect");
    tls.write(`GET / HTTP/1.1\r\nHost: ${HOST}\r\nConnection: close\r\n\r\n`);
    let answer = "";
    for await (const chunk of tls) answer += chunk;
    expect(answer).toMatch(/^HTTP\/1\.1 200 OK[\s\S]*\r\n\r\ninside$/);
    expect(handedOver - before).toBe(1);
    await allClosed();
  });

  it("replays a ClientHello sent in the same write as the CONNECT, before the 200", async () => {
    const before = handedOver;
    const raw = netConnect(port, "127.0.0.1");
    await once(raw, "connect");
    // A TLS client whose first write (the ClientHello) goes out glued to the CONNECT, and which
    // reads what follows the 200.
    let first = true;
    let answer200 = Buffer.alloc(0);
    const wire: Duplex = new Duplex({
      read() {},
      write(chunk: Buffer, _encoding, done) {
        const connectLine = Buffer.from(`CONNECT ${HOST}:443 HTTP/1.1\r\nHost: ${HOST}:443\r\n\r\n`);
        raw.write(first ? Buffer.concat([connectLine, chunk]) : chunk, done);
        first = false;
      },
      final(done) {
        raw.end();
        done();
      },
    });
    raw.on("data", (chunk: Buffer) => {
      if (answer200.length >= CONNECT_OK.length) {
        wire.push(chunk);
        return;
      }
      answer200 = Buffer.concat([answer200, chunk]);
      if (answer200.length < CONNECT_OK.length) return;
      expect(answer200.subarray(0, CONNECT_OK.length).toString("latin1")).toBe(CONNECT_OK);
      wire.push(answer200.subarray(CONNECT_OK.length));
    });
    raw.on("end", () => wire.push(null));
    const tls = tlsConnect({ socket: wire as unknown as Socket, servername: HOST, ca: ca.certPem });
    await once(tls, "secureConnect");
    tls.write(`GET / HTTP/1.1\r\nHost: ${HOST}\r\nConnection: close\r\n\r\n`);
    let answer = "";
    await new Promise<void>((resolve) =>
      tls.on("data", (chunk) => {
        answer += chunk;
        if (answer.endsWith("inside")) resolve();
      }),
    );
    expect(answer).toMatch(/inside$/);
    expect(handedOver - before).toBe(1);
    raw.destroy();
    await allClosed();
  });
});

describe("releaseAfterSurges", () => {
  it("gives memory back once a surge of connections has closed", async () => {
    const server = createServer();
    const released: number[] = [];
    let resolve: () => void = () => {};
    const done = new Promise<void>((r) => {
      resolve = r;
    });
    const serverSide = new Set<Socket>();
    server.on("connection", (s: Socket) => {
      serverSide.add(s);
      s.once("close", () => serverSide.delete(s));
    });
    releaseAfterSurges(
      server,
      () => {
        released.push(serverSide.size);
        resolve();
      },
      20,
    );
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const at = (server.address() as AddressInfo).port;
    const clients = await Promise.all(
      Array.from({ length: 24 }, async () => {
        const c = netConnect(at, "127.0.0.1");
        await once(c, "connect");
        return c;
      }),
    );
    while (serverSide.size < 24) await new Promise((r) => setImmediate(r));
    expect(released).toEqual([]); // nothing while the surge is open
    for (const c of clients) c.destroy();
    await done;
    expect(released).toEqual([0]);
    server.close();
  });
});
