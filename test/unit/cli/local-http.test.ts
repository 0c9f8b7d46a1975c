// The command line's requests to a broker (cli/local-http.ts), against small servers on
// 127.0.0.1 that answer well, break off, stall, send too much or switch protocols: every case
// settles, and port-probe tells "something answered" from "nothing answers".
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { AnswerError, localRequest } from "../../../cli/local-http.js";
import { probePort } from "../../../cli/port-probe.js";

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    s.close();
  }
});

/** A server on a free port of 127.0.0.1 answering with `handle`; its base URL. */
async function serve(handle: Parameters<typeof createServer>[1]): Promise<string> {
  const server = createServer(handle);
  servers.push(server);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe("localRequest", () => {
  it("reads a whole answer, with its status", async () => {
    const url = await serve((req, res) => {
      res.writeHead(req.method === "POST" ? 201 : 200, { "content-type": "application/json" });
      res.end(JSON.stringify({ ok: true, method: req.method }));
    });
    const got = await localRequest(`${url}/x`, { method: "POST", body: "{}", timeoutMs: 2000 });
    expect(got).toEqual({ status: 201, ok: true, text: '{"ok":true,"method":"POST"}' });
  });

  it("rejects, not as an answer, when nothing listens", async () => {
    const url = await serve(() => {});
    servers.pop()!.close();
    const err = await localRequest(url, { timeoutMs: 2000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(AnswerError);
  });

  it("rejects as an answer that broke off: a stalled body, a body too large, a switch of protocols", async () => {
    const stalled = await serve((_req, res) => {
      res.writeHead(200, { "content-length": "100" });
      res.write("{");
    });
    await expect(localRequest(stalled, { timeoutMs: 300 })).rejects.toBeInstanceOf(AnswerError);

    const large = await serve((_req, res) => {
      res.writeHead(200);
      const chunk = Buffer.alloc(1024 * 1024, "x");
      for (let i = 0; i < 5; i++) res.write(chunk);
      res.end();
    });
    await expect(localRequest(large, { timeoutMs: 5000 })).rejects.toThrow(/over 4194304 bytes/);

    // node's client sees a 101 only as an `upgrade` event: this once never settled.
    const upgrade = await serve(() => {});
    servers.at(-1)!.on("upgrade", (_req, socket) => {
      socket.end("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n");
    });
    servers.at(-1)!.removeAllListeners("request");
    const err = await localRequest(upgrade, {
      timeoutMs: 2000,
      headers: { connection: "upgrade", upgrade: "x" },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AnswerError);
  });
});

describe("probePort", () => {
  it("names a program that answers and then stalls as another program, not as nothing", async () => {
    const url = await serve((_req, res) => {
      res.writeHead(200, { "content-length": "100" });
      res.write("{");
    });
    expect(await probePort(url)).toEqual({ kind: "other" });
  });
});
