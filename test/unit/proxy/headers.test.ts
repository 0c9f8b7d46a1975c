import { describe, expect, it } from "vitest";
import {
  forwardableRequestHeaders,
  forwardableResponseHeaders,
  getHeader,
  setHeader,
} from "../../../proxy/headers.js";

describe("hop-by-hop headers", () => {
  it("drops hop-by-hop and proxy headers from requests, and those named in Connection", () => {
    const raw = [
      "Host",
      "api.example.com",
      "Connection",
      "keep-alive, X-Trace",
      "Keep-Alive",
      "timeout=5",
      "Proxy-Authorization",
      "Basic abc",
      "Transfer-Encoding",
      "chunked",
      "Expect",
      "100-continue",
      "Upgrade",
      "websocket",
      "X-Trace",
      "1",
      "Authorization",
      "Bearer x",
    ];
    const out = forwardableRequestHeaders(raw, "keep-alive, X-Trace");
    expect(out).toEqual(["host", "api.example.com", "authorization", "Bearer x"]);
  });

  it("drops hop-by-hop headers from responses and keeps repeated ones", () => {
    const out = forwardableResponseHeaders({
      "content-type": "text/event-stream",
      "transfer-encoding": "chunked",
      connection: "close",
      "set-cookie": ["a=1", "b=2"],
    });
    expect(out).toEqual({ "content-type": "text/event-stream", "set-cookie": ["a=1", "b=2"] });
  });

  it("sets and reads headers in a flat list", () => {
    const list = ["a", "1", "b", "2", "a", "3"];
    setHeader(list, "a", "9");
    expect(list).toEqual(["b", "2", "a", "9"]);
    expect(getHeader(list, "b")).toBe("2");
  });
});
