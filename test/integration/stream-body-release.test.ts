// Decision 199: a request body the broker read into memory (to send it again on another
// credential of a pool) is let go once the answer has begun to stream, instead of being kept for
// as long as the answer lasts. Eight answers, each to a 3 MiB request, are held open by the
// upstream after their first event; with the bodies kept, the process's ArrayBuffer memory
// stays 24 MiB above where it started until the answers end.
import type { ServerResponse } from "node:http";
import { Readable } from "node:stream";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { type ProxyAgent, request } from "undici";
import { afterAll, beforeAll, expect, it } from "vitest";
import { rulesFor } from "../helpers/fixture.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";

const STREAMS = 8;
const BODY = 3 * 1024 * 1024;
const PIECE = 64 * 1024;
const MIB = 1024 * 1024;

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

let f: InProcessFixture;
let agent: ProxyAgent;
let ph: string;
const open: ServerResponse[] = [];

beforeAll(async () => {
  f = await startInProcessFixture({
    // A pool of two: the body is read ahead (up to pool.retry_body_limit) to be sent again.
    rules: (u) =>
      rulesFor(u).replace("credentials: [OPENAI_API_KEY]", "credentials: [OPENAI_API_KEY, OPENAI_API_KEY_2]"),
    env: { OPENAI_API_KEY_2: "sk-real-openai-second-5d1c8e2a9b7f4063" },
  });
  agent = f.proxyAgent();
  ph = await f.placeholder("openai");
  // The upstream drops the body as it arrives, then sends one event and holds the stream open.
  f.upstream.streamingRoutes.set("POST /v1/chat/completions", (req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write('data: {"n":1}\n\n');
      open.push(res);
    });
  });
});

afterAll(async () => {
  for (const res of open) res.end();
  await agent?.close();
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

/** A body made as it is sent, so this process (the client) keeps none of it. */
async function* body(): AsyncGenerator<Buffer> {
  for (let sent = 0; sent < BODY; sent += PIECE) yield Buffer.alloc(PIECE, 0x61);
}

/** Starts one streamed answer; resolves with its status and first event once that has arrived. */
async function startStream() {
  const res = await request("https://api.openai.com/v1/chat/completions", {
    method: "POST",
    dispatcher: agent,
    headers: {
      authorization: `Bearer ${ph}`,
      "content-type": "application/json",
      "content-length": String(BODY),
    },
    body: Readable.from(body()),
  });
  const reader = res.body[Symbol.asyncIterator]();
  const first = await reader.next();
  return { status: res.statusCode, first: String(first.value), rest: reader };
}

async function arrayBufferMiB(): Promise<number> {
  // Twice, with a turn between: V8 frees an ArrayBuffer's memory after the collection that found it dead.
  for (let i = 0; i < 2; i++) {
    gc();
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return process.memoryUsage().arrayBuffers / MIB;
}

it("lets a request body go once its answer streams", async () => {
  // A first exchange warms the connections and buffers that then stay.
  const warm = await startStream();
  expect(warm.status).toBe(200);
  open.pop()?.end();
  for await (const _ of { [Symbol.asyncIterator]: () => warm.rest });

  const before = await arrayBufferMiB();
  const streams = await Promise.all(Array.from({ length: STREAMS }, startStream));
  for (const s of streams) {
    expect(s.status).toBe(200);
    expect(s.first).toContain('"n":1');
  }
  expect(open).toHaveLength(STREAMS);
  const during = await arrayBufferMiB();
  // Kept, the bodies alone would be STREAMS × 3 MiB = 24 MiB.
  expect(during - before, `ArrayBuffers ${before.toFixed(1)} → ${during.toFixed(1)} MiB`).toBeLessThan(6);

  for (const res of open.splice(0)) res.end();
  for (const s of streams) for await (const _ of { [Symbol.asyncIterator]: () => s.rest });
});
