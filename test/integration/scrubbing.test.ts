import type { IncomingMessage, ServerResponse } from "node:http";
import { brotliCompressSync, gzipSync } from "node:zlib";
import { request } from "undici";
import { describe, expect, it } from "vitest";
import { REAL_OPENAI } from "../helpers/fixture.js";
import { sharedOpenAIClient } from "../helpers/in-process.js";

const c = sharedOpenAIClient();

/** The key the upstream received, as it would echo it. */
function keyOf(req: IncomingMessage): string {
  return String(req.headers.authorization ?? "").replace(/^Bearer /, "");
}

async function get(path: string) {
  const res = await request(`https://api.openai.com${path}`, {
    method: "POST",
    dispatcher: c.agent,
    headers: { authorization: `Bearer ${c.ph}`, "accept-encoding": "gzip" },
    body: "{}",
  });
  const body = Buffer.from(await res.body.arrayBuffer()).toString("utf8");
  return { status: res.statusCode, headers: res.headers, body };
}

function expectClean(text: string): void {
  expect(text).not.toContain(REAL_OPENAI);
  expect(text).not.toContain(encodeURIComponent(REAL_OPENAI).slice(0, 20));
}

describe("response scrubbing", () => {
  it("replaces an echo in a response header with the placeholder", async () => {
    c.f.upstream.routes.set("POST /echo-header", (req: IncomingMessage, res: ServerResponse) => {
      res.writeHead(200, { "x-debug-key": `key=${keyOf(req)}`, "content-type": "text/plain" });
      res.end("ok");
    });
    const r = await get("/echo-header");
    expect(r.headers["x-debug-key"]).toBe(`key=${c.ph}`);
    expectClean(JSON.stringify(r.headers));
  });

  it("replaces an echo in an escaped JSON error body (a held 401)", async () => {
    c.f.upstream.routes.set("POST /echo-error", (req: IncomingMessage, res: ServerResponse) => {
      const message = `Incorrect API key provided: "${keyOf(req)}"`;
      res.writeHead(401, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          error: { message, type: "invalid_request_error", param: null, code: "invalid_api_key" },
        }),
      );
    });
    const r = await get("/echo-error");
    expect(r.status).toBe(401);
    expectClean(r.body);
    expect(JSON.parse(r.body).error.message).toContain(c.ph);
    // That 401 marked the only key invalid; as the pool's last resort it is still used.
    expect((await get("/echo-header")).status).toBe(200);
  });

  it("catches an echo split across SSE chunks, and passes chunks without a match at once", async () => {
    c.f.upstream.routes.set("POST /echo-sse", async (req: IncomingMessage, res: ServerResponse) => {
      const key = keyOf(req);
      res.writeHead(200, { "content-type": "text/event-stream" });
      const text = `data: {"content":"your key is ${key} ok"}\n\n`;
      // One byte at a time, each its own write: every split position is exercised.
      for (const ch of text) {
        res.write(ch);
        await new Promise((r) => setImmediate(r));
      }
      res.end("data: [DONE]\n\n");
    });
    const r = await get("/echo-sse");
    expectClean(r.body);
    expect(r.body).toContain(`your key is ${c.ph} ok`);
    expect(r.body.endsWith("data: [DONE]\n\n")).toBe(true);
  });

  it("catches a JSON echo with every character \\u-escaped, or escapes mixed, split across SSE chunks", async () => {
    const uEscape = (key: string, pick: (i: number) => boolean) =>
      [...key].map((c, i) => (pick(i) ? `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}` : c)).join("");
    c.f.upstream.routes.set("POST /echo-escaped", async (req: IncomingMessage, res: ServerResponse) => {
      const key = keyOf(req);
      res.writeHead(200, { "content-type": "text/event-stream" });
      const text = `data: {"all":"${uEscape(key, () => true)}","mixed":"${uEscape(key, (i) => i % 2 === 1)}"}\n\n`;
      for (let i = 0; i < text.length; i += 5) {
        res.write(text.slice(i, i + 5));
        await new Promise((r) => setImmediate(r));
      }
      res.end();
    });
    const r = await get("/echo-escaped");
    const json = JSON.parse(r.body.slice("data: ".length)) as { all: string; mixed: string };
    expect(json).toEqual({ all: c.ph, mixed: c.ph });
    expectClean(r.body);
  });

  it("scrubs a large body with a Content-Length", async () => {
    c.f.upstream.routes.set("POST /echo-big", (req: IncomingMessage, res: ServerResponse) => {
      const filler = "x".repeat(300 * 1024);
      const body = `${filler}${keyOf(req)}${filler}`;
      res.writeHead(200, { "content-type": "text/plain", "content-length": Buffer.byteLength(body) });
      res.end(body);
    });
    const r = await get("/echo-big");
    expectClean(r.body);
    // Streamed with its length kept: the echo is replaced by the placeholder fitted to it.
    expect(r.body.length).toBe(600 * 1024 + REAL_OPENAI.length);
    expect(r.headers["content-length"]).toBe(String(r.body.length));
    const fitted = (c.ph + "*".repeat(REAL_OPENAI.length)).slice(0, REAL_OPENAI.length);
    expect(r.body).toContain(fitted);
  });

  it("decompresses a gzip body the upstream sent anyway, and scrubs it", async () => {
    let asked = "";
    c.f.upstream.routes.set("POST /echo-gzip", (req: IncomingMessage, res: ServerResponse) => {
      asked = String(req.headers["accept-encoding"]);
      const body = gzipSync(
        JSON.stringify({ echoed: keyOf(req), encoded: Buffer.from(`u:${keyOf(req)}`).toString("base64") }),
      );
      res.writeHead(200, {
        "content-type": "application/json",
        "content-encoding": "gzip",
        "content-length": body.length,
      });
      res.end(body);
    });
    const r = await get("/echo-gzip");
    expect(asked).toBe("identity");
    expect(r.headers["content-encoding"]).toBeUndefined();
    expectClean(r.body);
    const json = JSON.parse(r.body) as { echoed: string; encoded: string };
    expect(json.echoed).toBe(c.ph);
    expect(Buffer.from(json.encoded, "base64").toString()).not.toContain(REAL_OPENAI);
  });

  it("undoes layered codings (gzip, then br) before scrubbing", async () => {
    c.f.upstream.routes.set("POST /echo-layered", (req: IncomingMessage, res: ServerResponse) => {
      const body = brotliCompressSync(gzipSync(JSON.stringify({ echoed: keyOf(req) })));
      res.writeHead(200, {
        "content-type": "application/json",
        "content-encoding": "gzip, br",
        "content-length": body.length,
      });
      res.end(body);
    });
    const r = await get("/echo-layered");
    expect(r.status).toBe(200);
    expect(r.headers["content-encoding"]).toBeUndefined();
    expect(JSON.parse(r.body)).toEqual({ echoed: c.ph });
  });

  it("refuses with 502 a body in a coding it cannot undo, streamed or held, instead of passing it unread", async () => {
    for (const status of [200, 401]) {
      c.f.upstream.routes.set("POST /echo-zstd", (req: IncomingMessage, res: ServerResponse) => {
        // Not really zstd: what matters is that keybroker cannot read it, and the key is inside.
        const body = Buffer.from(`zstd-framed:${keyOf(req)}`);
        res.writeHead(status, { "content-encoding": "zstd", "content-length": body.length });
        res.end(body);
      });
      const r = await get("/echo-zstd");
      expect(r.status, `upstream ${status}`).toBe(502);
      expect(r.headers["x-keybroker-error"]).toBe("upstream_unreachable");
      expect(r.body).toContain("content-encoding");
      expectClean(r.body);
    }
  });

  it("leaves responses to requests without a credential byte for byte", async () => {
    c.f.upstream.routes.set("POST /plain", (_req: IncomingMessage, res: ServerResponse) => {
      const body = gzipSync("untouched");
      res.writeHead(200, { "content-encoding": "gzip", "content-length": body.length });
      res.end(body);
    });
    const res = await request("https://api.openai.com/plain", {
      method: "POST",
      dispatcher: c.agent,
      body: "{}",
    });
    expect(res.headers["content-encoding"]).toBe("gzip");
    await res.body.arrayBuffer();
  });
});
