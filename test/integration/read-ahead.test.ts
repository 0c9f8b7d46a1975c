// Decision 201: the broker's sockets skip node's read-ahead turn after each read, and a request
// whose body came whole with its head is not announced on a turn of its own. Each such turn is a
// `process.nextTick`, about 5,000 instructions on Node 22 and 24; a plain request took four, and
// a tunnel (a host without a rule) one for each piece in each direction.
// The ticks this process schedules while requests pass are recorded, with the stream each is
// for, and told apart by port: the broker's side of each connection, or the client's and the
// fake upstream's (which keep node's ticks: they are not the broker's).
import { createHash } from "node:crypto";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import type { IncomingMessage } from "node:http";
import { Socket } from "node:net";
import { ProxyAgent, request, WebSocket } from "undici";
import { expect, it } from "vitest";
import { sharedOpenAIClient } from "../helpers/in-process.js";

const c = sharedOpenAIClient();

async function post(): Promise<number> {
  const res = await request("https://api.openai.com/v1/chat/completions", {
    method: "POST",
    dispatcher: c.agent,
    headers: { authorization: `Bearer ${c.ph}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "x".repeat(1000) }] }),
  });
  await res.body.text();
  return res.statusCode;
}

/** The ticks scheduled while `run` goes on: each callback's name and its first argument. */
async function ticksDuring(run: () => Promise<void>): Promise<Array<{ name: string; arg: unknown }>> {
  const seen: Array<{ name: string; arg: unknown }> = [];
  const original = process.nextTick;
  process.nextTick = ((cb: (...a: unknown[]) => void, ...args: unknown[]) => {
    seen.push({ name: cb.name, arg: args[0] });
    original(cb, ...args);
  }) as typeof process.nextTick;
  try {
    await run();
  } finally {
    process.nextTick = original;
  }
  return seen;
}

/** Which side of which connection a socket is, by its ports. */
function sideOf(s: Socket): string {
  if (s.localPort === c.f.broker.port) return "broker, client side";
  if (s.remotePort === c.f.upstream.port) return "broker, upstream side";
  if (s.remotePort === c.f.broker.port) return "client";
  if (s.localPort === c.f.upstream.port) return "upstream";
  return "other";
}

it("takes no read-ahead turn on its sockets and no turn to announce a whole body", async () => {
  for (let i = 0; i < 5; i++) expect(await post()).toBe(200);
  const requests = 20;
  const ticks = await ticksDuring(async () => {
    for (let i = 0; i < requests; i++) expect(await post()).toBe(200);
  });
  const readAhead = ticks.filter((t) => t.name === "maybeReadMore_").map((t) => sideOf(t.arg as Socket));
  const announced = ticks
    .filter((t) => t.name === "emitReadable_")
    .map((t) => t.arg)
    .filter((s) => (s as IncomingMessage).socket !== undefined && "method" in (s as object))
    .map((s) => sideOf((s as IncomingMessage).socket));
  // The other ends are node's own sockets and servers: their ticks show that ticks were seen.
  expect(readAhead.filter((side) => side === "client" || side === "upstream").length).toBeGreaterThan(0);
  expect(readAhead.filter((side) => side.startsWith("broker"))).toEqual([]);
  expect(announced.filter((side) => side.startsWith("broker"))).toEqual([]);
  // Decision 203: the answer is read on 'data', which node emits within the read; 'readable'
  // took a turn for every read of the upstream connection.
  const readableTurns = ticks
    .filter((t) => t.name === "emitReadable_" && t.arg instanceof Socket)
    .map((t) => sideOf(t.arg as Socket));
  expect(readableTurns.filter((side) => side === "broker, upstream side")).toEqual([]);
});

it("takes no read-ahead turn on either socket of a tunnel", async () => {
  // tunnel.test has no rule: resolve: sends it to the fake upstream, whose own certificate the
  // client checks through the tunnel.
  const direct = new ProxyAgent({
    uri: c.f.broker.url,
    requestTls: { ca: readFileSync(c.f.upstream.caPath, "utf8") },
  });
  try {
    const get = async () => {
      const res = await request("https://tunnel.test/v1/models", { dispatcher: direct });
      await res.body.text();
      return res.statusCode;
    };
    await get();
    const ticks = await ticksDuring(async () => {
      for (let i = 0; i < 10; i++) await get();
    });
    const readAhead = ticks.filter((t) => t.name === "maybeReadMore_").map((t) => sideOf(t.arg as Socket));
    expect(readAhead.filter((side) => side === "client" || side === "upstream").length).toBeGreaterThan(0);
    expect(readAhead.filter((side) => side.startsWith("broker"))).toEqual([]);
  } finally {
    await direct.close();
  }
});

/** A WebSocket upstream that sends each short text frame it gets back (unmasked). */
function echoSocket(req: IncomingMessage, socket: Socket): void {
  const accept = createHash("sha1")
    .update(`${req.headers["sec-websocket-key"]}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
    .digest("base64");
  socket.write(
    `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`,
  );
  let held = Buffer.alloc(0);
  socket.on("data", (chunk: Buffer) => {
    held = Buffer.concat([held, chunk]);
    // Frames of under 126 bytes, masked, as a client sends them.
    while (held.length >= 6 && held.length >= 6 + (held[1]! & 0x7f)) {
      const length = held[1]! & 0x7f;
      const mask = held.subarray(2, 6);
      const text = Buffer.from(held.subarray(6, 6 + length).map((b, i) => b ^ mask[i % 4]!));
      if ((held[0]! & 0x0f) === 0x1) socket.write(Buffer.concat([Buffer.from([0x81, length]), text]));
      held = held.subarray(6 + length);
    }
  });
  socket.on("error", () => socket.destroy());
}

it("takes no read-ahead turn on either socket of a WebSocket", async () => {
  c.f.upstream.upgrades.set("/v1/realtime-echo", echoSocket);
  const ws = new WebSocket("wss://api.openai.com/v1/realtime-echo", {
    dispatcher: c.agent,
    headers: { authorization: `Bearer ${c.ph}` },
  });
  const messages: string[] = [];
  ws.addEventListener("message", (e) => messages.push(String(e.data)));
  await once(ws as unknown as NodeJS.EventEmitter, "open");
  const ticks = await ticksDuring(async () => {
    // The fake upstream echoes each frame.
    for (let i = 0; i < 10; i++) {
      const seen = messages.length;
      ws.send(`frame ${i}`);
      while (messages.length === seen) await once(ws as unknown as NodeJS.EventEmitter, "message");
    }
  });
  ws.close();
  expect(messages.slice(-10)).toEqual(Array.from({ length: 10 }, (_, i) => `frame ${i}`));
  const readAhead = ticks.filter((t) => t.name === "maybeReadMore_").map((t) => sideOf(t.arg as Socket));
  expect(readAhead.filter((side) => side === "client" || side === "upstream").length).toBeGreaterThan(0);
  expect(readAhead.filter((side) => side.startsWith("broker"))).toEqual([]);
});
