import { describe, expect, it } from "vitest";
import {
  forwardableRequestHeaders,
  forwardableResponseHeaders,
  getHeader,
  isHopByHop,
  replaceHeaders,
  setHeader,
} from "../../../proxy/headers.js";

describe("hop-by-hop headers", () => {
  it("are exactly RFC 9110's connection headers, the proxy ones, expect and http2-settings", () => {
    const hop = [
      "connection",
      "keep-alive",
      "proxy-connection",
      "proxy-authorization",
      "proxy-authenticate",
      "te",
      "trailer",
      "transfer-encoding",
      "upgrade",
      "expect",
      "http2-settings",
    ];
    // Names that differ by a letter, a suffix or their case are end-to-end (names come lower-cased).
    const not = ["t", "tee", "trailers", "connections", "x-upgrade", "upgrad", "Connection", "host", ""];
    expect(hop.filter(isHopByHop)).toEqual(hop);
    expect(not.filter(isHopByHop)).toEqual([]);
    const raw = hop.flatMap((h) => [h, "1"]).concat(["x-a", "2"]);
    expect(forwardableRequestHeaders(raw, undefined)).toEqual(["x-a", "2"]);
  });

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

  it("strips only the Connection header itself when it says just keep-alive or close", () => {
    const raw = ["Connection", " Keep-Alive ", "Keep-Alive", "timeout=5", "X-Keep", "1", "Close", "x"];
    expect(forwardableRequestHeaders(raw, " Keep-Alive ")).toEqual(["x-keep", "1", "close", "x"]);
    expect(forwardableRequestHeaders(["Connection", "close", "X-A", "1"], "close")).toEqual(["x-a", "1"]);
    // A token list is read token by token, also when it starts with keep-alive.
    expect(
      forwardableRequestHeaders(["Connection", "close, X-A", "X-A", "1", "X-B", "2"], "close, X-A"),
    ).toEqual(["x-b", "2"]);
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

describe("replaceHeaders", () => {
  it("makes the list hold the other's entries, in place, whether it was longer or shorter", () => {
    const list = ["a", "1", "b", "2", "c", "3"];
    const same = list;
    replaceHeaders(list, ["x", "9"]);
    expect(list).toBe(same);
    expect(list).toEqual(["x", "9"]);
    replaceHeaders(list, ["p", "1", "q", "2", "r", "3"]);
    expect(list).toEqual(["p", "1", "q", "2", "r", "3"]);
    replaceHeaders(list, []);
    expect(list).toEqual([]);
  });
});
