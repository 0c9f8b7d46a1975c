// docs/spec.md §3.8, issue 24 item 7: at `limits.connections`, the connections that have not sent a
// request yet (an idle CONNECT, no ClientHello) are closed oldest first to admit new ones, before
// any that has (decision 109; connection-cap-idle.test.ts for those, decision 138). Before, the cap refused the new connection,
// so a flood of idle CONNECTs locked out a client that opens a tunnel per request, as curl does.
import { once } from "node:events";
import { readFileSync } from "node:fs";
import type { Socket } from "node:net";
import { type TLSSocket, connect as tlsConnect } from "node:tls";
import { afterAll, beforeAll, expect, it } from "vitest";
import { runProcess } from "../helpers/broker.js";
import { curlChatArgs } from "../helpers/curl.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { connectThrough, openSocket, openTunnel, parseAnswer } from "../helpers/raw.js";

const CAP = 64;
const FLOOD = 100;
/** Requests of the fresh-tunnel client, each on a CONNECT of its own. */
const FRESH = 20;

let f: InProcessFixture;
let ph: string;

beforeAll(async () => {
  // Timeouts long enough that nothing is closed by them while the test runs.
  f = await startInProcessFixture({
    extraRules: `timeouts: { handshake: 60s, headers: 60s, keep_alive: 60s }\nlimits: { connections: ${CAP} }\n`,
  });
  ph = await f.placeholder("openai");
});

afterAll(async () => {
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

/** An idle CONNECT to a provider's host; resolves once answered 200 (or closed unanswered). */
async function idleConnect(): Promise<{ socket: Socket; answered: boolean }> {
  const socket = await openSocket(f.broker.port);
  socket.write("CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n");
  const answered = await new Promise<boolean>((resolve) => {
    socket.once("data", (d: Buffer) => resolve(d.toString().startsWith("HTTP/1.1 200")));
    socket.once("close", () => resolve(false));
  });
  return { socket, answered };
}

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

/** Collects what `socket` receives until `done(text)` says the answer is whole. */
function answerOn(socket: Socket | TLSSocket, done: (text: string) => boolean): Promise<string> {
  let text = "";
  return new Promise((resolve, reject) => {
    const onData = (d: Buffer) => {
      text += d.toString("latin1");
      if (!done(text)) return;
      socket.off("data", onData);
      socket.off("close", onClose);
      resolve(text);
    };
    const onClose = () => reject(new Error(`closed before a whole answer: ${text.slice(0, 200)}`));
    if (socket.destroyed) onClose();
    socket.on("data", onData);
    socket.once("close", onClose);
  });
}

/** One keep-alive request inside an intercepted tunnel; resolves with the status. */
async function models(tls: TLSSocket): Promise<number> {
  const answer = answerOn(tls, (text) => {
    const { headers, body } = parseAnswer(text);
    const length = headers["content-length"];
    return length !== undefined ? body.length >= Number(length) : body.endsWith("0\r\n\r\n");
  });
  tls.write(`GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer ${ph}\r\n\r\n`);
  return parseAnswer(await answer).status;
}

it("more idle CONNECTs than the cap: the oldest are closed, and a client opening a tunnel per request gets every answer", async () => {
  // Open before the flood, so older than all of it: an intercepted tunnel that has sent a
  // request, and a plain tunnel (no rule names evil.example) the client has sent bytes through.
  const intercepted = await openTunnel(f.broker.port, "api.openai.com", f.broker.caPath);
  const plain = tlsConnect({
    socket: await connectThrough(f.broker.port, "evil.example:443"),
    servername: "evil.example",
    ca: readFileSync(f.upstream.caPath, "utf8"),
  });
  plain.on("error", () => {});
  const plainReady = once(plain, "secureConnect");
  const flood: Socket[] = [];
  /** Flood sockets by index, in the order the broker closed them. */
  const closedOrder: number[] = [];
  try {
    expect(await models(intercepted)).toBe(200);
    await plainReady;

    // Opened one after another: every one is admitted (answered 200), each past the cap by
    // closing the oldest that has sent nothing.
    let answered = 0;
    for (let i = 0; i < FLOOD; i++) {
      const idle = await idleConnect();
      if (idle.answered) answered++;
      idle.socket.once("close", () => closedOrder.push(i));
      flood.push(idle.socket);
    }

    // A new tunnel per request: every one is answered.
    const statuses: number[] = [];
    for (let i = 0; i < FRESH; i++) statuses.push(await freshRequest());
    expect(statuses).toEqual(Array(FRESH).fill(200));

    // The two tunnels in use were never closed for room.
    expect(await models(intercepted)).toBe(200);
    expect(plain.destroyed).toBe(false);

    // They hold two places, the flood the rest: the first FLOOD - CAP + 2 made room.
    expect(answered).toBe(FLOOD);
    const shed = FLOOD - CAP + 2;
    await Promise.all(flood.slice(0, shed).map((s) => (s.destroyed ? undefined : once(s, "close"))));
    // Closed oldest first: the closes are the flood's first connections, in order. Each fresh
    // tunnel closed at most one more (its own closed once answered, so often none).
    expect(closedOrder.length).toBeGreaterThanOrEqual(shed);
    expect(closedOrder.length).toBeLessThanOrEqual(shed + FRESH);
    expect(closedOrder).toEqual(closedOrder.map((_, i) => i));
    expect(flood.slice(shed + FRESH).every((s) => !s.destroyed)).toBe(true);
    expect(f.broker.stderr()).toContain("those that have sent no request first");
  } finally {
    for (const s of flood) s.destroy();
    intercepted.destroy();
    plain.destroy();
  }
});
