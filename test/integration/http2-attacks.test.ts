// Bad HTTP/2 input inside an intercepted connection (docs/spec.md §3.8, decision 157), beside the
// HTTP/1.1 request corpus: floods and oversized header blocks end the offending stream or
// connection, nothing reaches the upstream from them, and every other client goes on being served.
import { once } from "node:events";
import { constants } from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findSecrets, outputs } from "../helpers/broker.js";
import { REAL_OPENAI } from "../helpers/fixture.js";
import { h2Request, h2Through } from "../helpers/h2-client.js";
import { type H2Upstream, startH2Upstream } from "../helpers/h2-upstream.js";
import { type InProcessBroker, startOpenAIBehind } from "../helpers/in-process.js";

let up: H2Upstream;
let broker: InProcessBroker;
let home: string;
let key: string;

beforeAll(async () => {
  up = await startH2Upstream();
  ({ broker, home, placeholder: key } = await startOpenAIBehind(up, "timeouts: { keep_alive: 1s }\n"));
});

afterAll(async () => {
  await broker?.stop();
  await up?.close();
  expect(findSecrets([REAL_OPENAI], [home], [...outputs, broker.stderr()])).toEqual([]);
});

const open = () => h2Through(broker.port, "api.openai.com", broker.bundlePath);

/** A well-behaved client on its own connection still gets its answer. */
async function othersServed(): Promise<void> {
  const { session, tls } = await open();
  const a = await h2Request(session, {
    ":method": "GET",
    ":path": "/v1/models",
    authorization: `Bearer ${key}`,
  });
  session.close();
  tls.destroy();
  expect(a.status).toBe(200);
}

describe("HTTP/2 limits and floods", () => {
  it("announces its limits: concurrent streams and header list size", async () => {
    const { session, tls } = await open();
    // The session was made in this tick: the broker's SETTINGS cannot have arrived yet.
    await once(session, "remoteSettings");
    expect(session.remoteSettings.maxConcurrentStreams).toBe(100);
    expect(session.remoteSettings.maxHeaderListSize).toBe(16 * 1024);
    session.close();
    tls.destroy();
  });

  it("refuses a header block that decodes past the limit (an HPACK bomb), sending nothing", async () => {
    const { session, tls } = await open();
    const before = up.received.length;
    // One 4 KiB value indexed once and referenced 64 times: a few hundred bytes on the wire,
    // 256 KiB decoded.
    const big = "b".repeat(4096);
    const headers: Record<string, string | string[]> = {
      ":method": "GET",
      ":path": "/v1/models",
      authorization: `Bearer ${key}`,
      "x-bomb": Array(64).fill(big) as string[],
    };
    const a = await h2Request(session, headers as Record<string, string>);
    tls.destroy();
    expect(a.status === 431 || a.rstCode !== 0).toBe(true);
    expect(up.received.length).toBe(before);
    await othersServed();
  });

  it("survives a rapid-reset flood: streams opened and cancelled at once", async () => {
    const { session, tls } = await open();
    const closed = once(tls, "close");
    for (let i = 0; i < 2000 && !session.destroyed; i++) {
      try {
        const s = session.request({
          ":method": "GET",
          ":path": "/v1/models",
          authorization: `Bearer ${key}`,
        });
        s.on("error", () => {});
        s.close(constants.NGHTTP2_CANCEL);
      } catch {
        break;
      }
    }
    await othersServed();
    tls.destroy();
    await closed;
  });

  it("survives a SETTINGS flood", async () => {
    const { session, tls } = await open();
    for (let i = 0; i < 5000 && !session.destroyed; i++) {
      try {
        session.settings({ initialWindowSize: 65535 + (i % 2) });
      } catch {
        break;
      }
    }
    await othersServed();
    tls.destroy();
  });

  it("a client that never opens its window stalls only its own stream", async () => {
    up.streaming.set("/v1/huge", (stream) => {
      stream.respond({ ":status": 200, "content-type": "application/octet-stream" });
      const chunk = Buffer.alloc(64 * 1024, 120);
      let sent = 0;
      const pump = () => {
        while (sent < 64 * 1024 * 1024) {
          sent += chunk.length;
          if (!stream.write(chunk)) {
            stream.once("drain", pump);
            return;
          }
        }
        stream.end();
      };
      pump();
    });
    const { session, tls } = await open();
    // A window of zero: nothing may be sent to it after the head.
    session.settings({ initialWindowSize: 0 });
    await once(session, "localSettings");
    const s = session.request({ ":method": "GET", ":path": "/v1/huge", authorization: `Bearer ${key}` });
    s.on("error", () => {});
    await once(s, "response");
    await othersServed();
    tls.destroy();
  });

  it("closes a connection that stays without streams for timeouts.keep_alive", async () => {
    const { session, tls } = await open();
    await h2Request(session, { ":method": "GET", ":path": "/v1/models", authorization: `Bearer ${key}` });
    await once(tls, "close");
    expect(session.destroyed || session.closed).toBe(true);
  });
});
