// A streamed HTTP/1.1 body is framed by keybroker, one buffer a chunk, and node still writes the
// last chunk, the terminator and the trailers (proxy/response-body.ts, bodyWriter). Real node
// HTTP server on 127.0.0.1, read byte for byte from a raw socket.
import type { IncomingHttpHeaders, ServerResponse } from "node:http";
import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { http } from "../../../core/node-http.js";
import type { ExchangeResponse } from "../../../proxy/exchange.js";
import { frameChunk, startResponse } from "../../../proxy/response-body.js";
import { ScrubPatterns } from "../../../proxy/scrub-stream.js";

const SECRET = "sk-test-chunked-secret-0123456789";
const PLACEHOLDER = "PLACEHOLDER-CHUNKED";

interface Answer {
  headers: IncomingHttpHeaders;
  chunks: string[];
  trailers?: Record<string, string>;
  patterns?: ScrubPatterns;
}

let server: ReturnType<typeof http.createServer> | undefined;
let client: Socket | undefined;
afterEach(async () => {
  client?.destroy();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

/** Serves each request with the next answer, counting the socket writes each body chunk takes. */
async function serve(answers: Answer[], writesPerChunk: number[]): Promise<number> {
  server = http.createServer((_req, res: ServerResponse) => {
    const answer = answers.shift()!;
    const socket = res.socket!;
    let writes = 0;
    const write = socket.write;
    socket.write = function (this: Socket, ...args: unknown[]) {
      writes++;
      return (write as (...a: unknown[]) => boolean).apply(this, args);
    } as typeof socket.write;
    const sink = startResponse(
      res as unknown as ExchangeResponse,
      200,
      "OK",
      answer.headers,
      answer.patterns,
    );
    writes = 0; // the head, flushed for an event stream
    for (const chunk of answer.chunks) {
      const before = writes;
      sink.write(Buffer.from(chunk));
      writesPerChunk.push(writes - before);
    }
    if (answer.trailers) res.addTrailers(answer.trailers);
    sink.end(() => {
      socket.write = write;
    });
  });
  await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
  return (server.address() as { port: number }).port;
}

/** Sends one GET on `socket` and returns the raw bytes of the answer up to its last chunk. */
function exchange(socket: Socket, path: string): Promise<{ head: string; body: string }> {
  return new Promise((resolve, reject) => {
    let raw = "";
    const onData = (data: Buffer) => {
      raw += data.toString("latin1");
      const split = raw.indexOf("\r\n\r\n");
      if (split === -1) return;
      const body = raw.slice(split + 4);
      // The last chunk, then trailer fields, then an empty line.
      const last = body.search(/(^|\r\n)0\r\n/);
      if (last === -1 || !body.endsWith("\r\n\r\n") || body.length <= last + 3) return;
      socket.off("data", onData);
      resolve({ head: raw.slice(0, split), body });
    };
    socket.on("data", onData);
    socket.once("error", reject);
    socket.write(`GET ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`);
  });
}

describe("a streamed HTTP/1.1 body", () => {
  it("frames each chunk as one write, and node ends it, with trailers, on a connection kept open", async () => {
    const writes: number[] = [];
    const port = await serve(
      [
        { headers: { "content-type": "text/event-stream" }, chunks: ["data: a\n\n", "", "data: bb\n\n"] },
        {
          headers: { "content-type": "text/event-stream" },
          chunks: ["data: second\n\n"],
          trailers: { "x-done": "yes" },
        },
      ],
      writes,
    );
    client = connect(port, "127.0.0.1");
    const first = await exchange(client, "/one");
    expect(first.head).toMatch(/transfer-encoding: chunked/i);
    expect(first.body).toBe("9\r\ndata: a\n\n\r\na\r\ndata: bb\n\n\r\n0\r\n\r\n");
    // The same connection answers again: the framing left node's keep-alive state intact.
    const second = await exchange(client, "/two");
    expect(second.body).toBe("e\r\ndata: second\n\n\r\n0\r\nx-done: yes\r\n\r\n");
    // node's own framing takes four writes a chunk (size, CRLF, data, CRLF); nothing for an empty one.
    expect(writes).toEqual([1, 0, 1, 1]);
  });

  it("frames what the scrubber lets through, holding a split secret until it is whole", async () => {
    const writes: number[] = [];
    const patterns = new ScrubPatterns([{ secret: SECRET, replacement: PLACEHOLDER }]);
    const port = await serve(
      [
        {
          headers: { "content-type": "text/event-stream" },
          chunks: [`data: ${SECRET.slice(0, 10)}`, `${SECRET.slice(10)} end\n\n`],
          patterns,
        },
      ],
      writes,
    );
    client = connect(port, "127.0.0.1");
    const { body } = await exchange(client, "/scrubbed");
    // Read the chunks back by their sizes: the framing must be exact for the text to come out.
    let text = "";
    let at = 0;
    for (;;) {
      const eol = body.indexOf("\r\n", at);
      const size = Number.parseInt(body.slice(at, eol), 16);
      if (size === 0) break;
      text += body.slice(eol + 2, eol + 2 + size);
      expect(body.slice(eol + 2 + size, eol + 4 + size)).toBe("\r\n");
      at = eol + 4 + size;
    }
    expect(text).toBe(`data: ${PLACEHOLDER} end\n\n`);
    expect(body).not.toContain(SECRET.slice(10));
    expect(writes.every((n) => n <= 1)).toBe(true);
  });

  it("frameChunk writes the size in hex", () => {
    expect(frameChunk(Buffer.alloc(255, 0x61)).subarray(0, 4).toString("latin1")).toBe("ff\r\n");
    expect(frameChunk(Buffer.from("x")).toString("latin1")).toBe("1\r\nx\r\n");
    for (const size of [0x10, 0xfff, 0x1000, 0x4000, 0x12345]) {
      const chunk = Buffer.alloc(size, 0x62);
      const framed = frameChunk(chunk);
      const head = `${size.toString(16)}\r\n`;
      expect(framed.subarray(0, head.length).toString("latin1")).toBe(head);
      expect(framed.subarray(head.length, head.length + size).equals(chunk)).toBe(true);
      expect(framed.subarray(head.length + size).toString("latin1")).toBe("\r\n");
    }
  });
});
