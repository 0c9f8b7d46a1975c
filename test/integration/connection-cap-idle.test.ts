// docs/spec.md §3.8, decision 138: at `limits.connections` a connection that sent a request and was
// answered is idle again, and the one idle the longest is closed to admit a new client. Before,
// a connection that had once sent a request was never closed for room, so a flood that sent one
// cheap request per connection now and then locked out a client opening a tunnel per request.
// A connection with a request in flight is never closed; with every one busy, a new one is refused.
import { once } from "node:events";
import type { ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { TLSSocket } from "node:tls";
import { afterAll, beforeAll, expect, it } from "vitest";
import { runProcess } from "../helpers/broker.js";
import { curlChatArgs } from "../helpers/curl.js";
import { type Fixture, startFixture } from "../helpers/fixture.js";
import { openSocket, openTunnel, parseAnswer, untilClosed } from "../helpers/raw.js";

const CAP = 20;
/** Requests of the fresh-tunnel client, each on a CONNECT of its own. */
const FRESH = 10;

let f: Fixture;
let ph: string;
/** Answers of the upstream's slow route, held until the test sends them. */
const held: ServerResponse[] = [];
let heldArrived: () => void = () => {};

beforeAll(async () => {
  // Timeouts long enough that nothing is closed by them while the test runs.
  f = await startFixture({
    extraRules: `timeouts: { handshake: 60s, headers: 60s, keep_alive: 60s }\nlimits: { connections: ${CAP} }\n`,
  });
  ph = await f.placeholder("openai");
  f.upstream.routes.set("GET /v1/slow", (_req, res) => {
    held.push(res);
    heldArrived();
  });
});

afterAll(async () => {
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

/** curl through the broker: a new connection and CONNECT for each call. */
async function freshRequest(): Promise<number> {
  const r = await runProcess("curl", [
    "-x",
    f.broker.url,
    "--cacert",
    f.broker.bundlePath,
    ...curlChatArgs(ph),
  ]);
  return Number(r.stdout.trimEnd().split("\n").at(-1));
}

/** A cheap request on the listener that keeps its connection open; resolves with the status. */
async function health(socket: Socket): Promise<number> {
  const answer = once(socket, "data") as Promise<[Buffer]>;
  socket.write("GET /__keybroker/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  return parseAnswer((await answer)[0].toString()).status;
}

/** One keep-alive request inside an intercepted tunnel; resolves with the status. */
async function models(tls: TLSSocket): Promise<number> {
  let text = "";
  const answer = new Promise<string>((resolve, reject) => {
    const onData = (d: Buffer) => {
      text += d.toString("latin1");
      const { headers, body } = parseAnswer(text);
      if (headers["content-length"] === undefined || body.length < Number(headers["content-length"])) return;
      tls.off("data", onData);
      tls.off("close", onClose);
      resolve(text);
    };
    const onClose = () => reject(new Error(`closed before a whole answer: ${text.slice(0, 200)}`));
    tls.on("data", onData);
    tls.once("close", onClose);
  });
  tls.write(`GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer ${ph}\r\n\r\n`);
  return parseAnswer(await answer).status;
}

/** Sends a request the upstream holds; resolves once the upstream has it, with its status to come. */
async function slow(tls: TLSSocket): Promise<{ status: Promise<number> }> {
  const arrived = new Promise<void>((resolve) => {
    heldArrived = resolve;
  });
  let text = "";
  const status = new Promise<number>((resolve, reject) => {
    tls.on("data", (d: Buffer) => {
      text += d.toString("latin1");
      if (text.endsWith("done")) resolve(parseAnswer(text).status);
    });
    tls.once("close", () => reject(new Error(`closed before its answer: ${text.slice(0, 200)}`)));
  });
  status.catch(() => {});
  tls.write(`GET /v1/slow HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer ${ph}\r\n\r\n`);
  await arrived;
  return { status };
}

function release(): void {
  for (const res of held.splice(0)) answer(res);
}

function answer(res: ServerResponse): void {
  res.writeHead(200, { "content-length": "4" });
  res.end("done");
}

/** Resolves once the broker has logged `text` (its log reaches the test a moment after the event). */
function logged(text: string): Promise<void> {
  return new Promise((resolve) => {
    const check = () => {
      if (!f.broker.stderr().includes(text)) return;
      f.broker.child.stderr!.off("data", check);
      resolve();
    };
    f.broker.child.stderr!.on("data", check);
    check();
  });
}

it("connections that each send a cheap request now and then: the one idle the longest makes room, and every new tunnel is served", async () => {
  // The cap filled with keep-alive connections; each new client opens a tunnel, is answered and
  // stays, as the flood does, so the cap is full again for the next one.
  const pool: { socket: Socket | TLSSocket; ask: () => Promise<number> }[] = [];
  const closedOrder: number[] = [];
  const track = (socket: Socket | TLSSocket, ask: () => Promise<number>) => {
    const index = pool.length;
    socket.once("close", () => closedOrder.push(index));
    pool.push({ socket, ask });
  };
  try {
    for (let i = 0; i < CAP; i++) {
      const socket = await openSocket(f.broker.port);
      track(socket, () => health(socket));
    }
    const statuses: number[] = [];
    for (let round = 0; round < FRESH; round++) {
      // Every connection still open sends a request, `round` first: it is then the one idle the longest.
      for (const c of pool.slice(round)) expect(await c.ask()).toBe(200);
      const tunnel = await openTunnel(f.broker.port, "api.openai.com", f.broker.caPath);
      statuses.push(await models(tunnel));
      track(tunnel, () => models(tunnel));
      const shed = pool[round]!.socket;
      if (!shed.destroyed) await new Promise((resolve) => shed.once("close", resolve));
    }
    expect(statuses).toEqual(Array(FRESH).fill(200));
    expect(closedOrder).toEqual([...Array(FRESH).keys()]);
    expect(pool.slice(FRESH).every((c) => !c.socket.destroyed)).toBe(true);
    await logged("closing the connections idle the longest");
  } finally {
    for (const c of pool) c.socket.destroy();
  }
});

it("a connection with a request in flight is not closed for room, even when its previous request ended first", async () => {
  const tunnel = await openTunnel(f.broker.port, "api.openai.com", f.broker.caPath);
  const keepers: Socket[] = [];
  try {
    // The tunnel's request starts before any keeper's: by when its connection last began or
    // ended a request, it is the oldest.
    const { status: answer } = await slow(tunnel);
    for (let i = 0; i < CAP - 1; i++) {
      const socket = await openSocket(f.broker.port);
      keepers.push(socket);
      expect(await health(socket)).toBe(200);
    }
    expect(await freshRequest()).toBe(200);
    if (!keepers[0]!.destroyed) await once(keepers[0]!, "close");
    expect(tunnel.destroyed).toBe(false);
    release();
    expect(await answer).toBe(200);
  } finally {
    release();
    for (const s of keepers) s.destroy();
    tunnel.destroy();
  }
});

it("with a request in flight on every open connection, a new one is refused until one is answered", async () => {
  const tunnels: TLSSocket[] = [];
  const answers: Promise<number>[] = [];
  try {
    for (let i = 0; i < CAP; i++) {
      const tunnel = await openTunnel(f.broker.port, "api.openai.com", f.broker.caPath);
      tunnels.push(tunnel);
      answers.push((await slow(tunnel)).status);
    }
    const late = await openSocket(f.broker.port);
    late.write("GET /__keybroker/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    expect((await untilClosed(late)).text).toBe("");
    expect(tunnels.every((t) => !t.destroyed)).toBe(true);
    await logged("every one has a request in flight");

    // The first one answered is idle: a new client is admitted in its place.
    answer(held.shift()!);
    expect(await answers[0]).toBe(200);
    expect(await freshRequest()).toBe(200);
    if (!tunnels[0]!.destroyed) await new Promise((resolve) => tunnels[0]!.once("close", resolve));
    expect(tunnels.slice(1).every((t) => !t.destroyed)).toBe(true);
    release();
    expect(await Promise.all(answers.slice(1))).toEqual(Array(CAP - 1).fill(200));
  } finally {
    release();
    for (const t of tunnels) t.destroy();
  }
});
