// The HTTP/2 upstream's request, on a session that hands over its events in the order node
// produced them for some streams of a busy session (1,000 event streams on ten sessions,
// `npm run bench --only idle --upstream-h2`): the first body bytes before the head.
import { EventEmitter } from "node:events";
import type { ClientHttp2Session } from "node:http2";
import type { Dispatcher } from "undici";
import { describe, expect, it } from "vitest";
import { H2Sessions } from "../../../proxy/upstream-h2.js";

class FakeStream extends EventEmitter {
  rstCode: number | undefined;
  destroyed = false;
  setTimeout(): void {}
  close(): void {}
  pause(): void {}
  resume(): void {}
}

function fakeSession(stream: FakeStream): ClientHttp2Session {
  return { request: () => stream } as unknown as ClientHttp2Session;
}

/** A GET through `H2Sessions.request` on `stream`; `seen` records what the handler was told. */
function requestOn(stream: FakeStream): string[] {
  const seen: string[] = [];
  const handler: Dispatcher.DispatchHandler = {
    onResponseStart: (_c, status) => seen.push(`head ${status}`),
    onResponseData: (_c, chunk) => seen.push(`data ${String(chunk)}`),
    onResponseEnd: () => seen.push("end"),
    onResponseError: (_c, err) => seen.push(`error ${err.message}`),
  };
  new H2Sessions().request(
    fakeSession(stream),
    {
      origin: "https://api.example.test",
      path: "/v1/responses",
      method: "GET",
      headers: [],
      body: null,
      headersTimeout: 30_000,
      bodyTimeout: 30_000,
    },
    handler,
  );
  return seen;
}

describe("H2Sessions.request", () => {
  it("body bytes that arrive before the head are handed over after it, none lost", async () => {
    const stream = new FakeStream();
    const seen = requestOn(stream);
    stream.emit("data", Buffer.from("data: one\n\n"));
    stream.emit("data", Buffer.from("data: two\n\n"));
    stream.emit("response", { ":status": 200, "content-type": "text/event-stream" });
    stream.emit("data", Buffer.from("data: three\n\n"));
    stream.emit("end");
    await new Promise((r) => setImmediate(r));
    expect(seen).toEqual([
      "head 200",
      "data data: one\n\n",
      "data data: two\n\n",
      "data data: three\n\n",
      "end",
    ]);
  });

  it("lets go of the request when the stream closes: node keeps closed streams until a full GC", async () => {
    const stream = new FakeStream();
    const seen = requestOn(stream);
    const events = ["response", "data", "trailers", "end", "error", "close"];
    expect(events.every((e) => stream.listenerCount(e) > 0)).toBe(true);
    stream.emit("response", { ":status": 200 });
    stream.emit("data", Buffer.from("{}"));
    stream.emit("end");
    stream.emit("close");
    await new Promise((r) => setImmediate(r));
    expect(seen).toEqual(["head 200", "data {}", "end"]);
    // Nothing of the request is reachable from the stream any more: one error listener is
    // left, which knows nothing of it, so a late error neither throws nor reaches the handler.
    expect(events.map((e) => stream.listenerCount(e))).toEqual([0, 0, 0, 0, 1, 0]);
    stream.emit("error", new Error("late"));
    stream.emit("data", Buffer.from("late"));
    expect(seen).toEqual(["head 200", "data {}", "end"]);
  });

  it("a stream reset before its answer still fails the request once, then lets go", async () => {
    const stream = new FakeStream();
    const seen = requestOn(stream);
    stream.rstCode = 2;
    stream.emit("close");
    await new Promise((r) => setImmediate(r));
    expect(seen).toEqual(["error the upstream reset the stream (code 2)"]);
    expect(stream.listenerCount("data") + stream.listenerCount("response")).toBe(0);
  });
});
