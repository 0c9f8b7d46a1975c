// Raw requests the broker must refuse itself, on the listener and inside intercepted connections:
// bad CONNECT ports, request targets naming another origin, requests without Host, and what
// node's HTTP parser rejects. Every refusal has docs/spec.md §11's shape and nothing reaches the upstream.
import { once } from "node:events";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REAL_OPENAI } from "../helpers/fixture.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { brokerError, openSocket, parseAnswer, rawExchange, tunnelExchange } from "../helpers/raw.js";

let f: InProcessFixture;

beforeAll(async () => {
  f = await startInProcessFixture();
});

afterAll(async () => {
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

const inTunnel = (request: string, host = "api.openai.com") =>
  tunnelExchange(f.broker.port, host, f.broker.caPath, request);

/** Runs `send` and checks the upstream received nothing meanwhile. */
async function reachesNothing(send: () => Promise<string>): Promise<string> {
  const before = f.upstream.received.length;
  const text = await send();
  expect(f.upstream.received.length).toBe(before);
  return text;
}

describe("CONNECT targets", () => {
  for (const target of [
    "api.openai.com:0",
    "api.openai.com:65536",
    "api.openai.com:99999",
    "api.openai.com:https",
    "api.openai.com:-1",
    "api.openai.com:",
    "api.openai.com",
    "tunnel.test:0",
  ]) {
    it(`refuses CONNECT ${target} with 400`, async () => {
      const text = await reachesNothing(() =>
        rawExchange(f.broker.port, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`),
      );
      expect(brokerError(text)).toMatchObject({ status: 400, code: "bad_request" });
    });
  }

  it("still accepts the highest port", async () => {
    const text = await rawExchange(
      f.broker.port,
      "CONNECT unknown-host.invalid:65535 HTTP/1.1\r\nHost: unknown-host.invalid:65535\r\n\r\n",
    );
    // Past the port check: the name does not resolve.
    expect(brokerError(text)).toMatchObject({ status: 502, code: "upstream_unreachable" });
  });
});

describe("request targets inside an intercepted connection", () => {
  for (const target of [
    "https://other.test/x",
    "https://api.openai.com.evil.test/v1/models",
    "http://api.openai.com/v1/models",
    "https://api.openai.com:8443/v1/models",
    "https://user@api.openai.com/v1/models",
    "*",
  ]) {
    it(`refuses ${target} with 400, injecting nothing`, async () => {
      const ph = await f.placeholder("openai");
      const text = await reachesNothing(() =>
        inTunnel(
          `GET ${target} HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer ${ph}\r\nConnection: close\r\n\r\n`,
        ),
      );
      expect(brokerError(text)).toMatchObject({ status: 400, code: "bad_request" });
    });
  }

  it("accepts an absolute URL of the connection's own origin, sending its path", async () => {
    const ph = await f.placeholder("openai");
    const text = await inTunnel(
      `GET https://API.openai.com:443/v1/models?limit=2 HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer ${ph}\r\nConnection: close\r\n\r\n`,
    );
    expect(parseAnswer(text).status).toBe(200);
    const got = f.upstream.received.at(-1)!;
    expect(got.url).toBe("/v1/models?limit=2");
    expect(got.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
  });
});

describe("requests without Host", () => {
  it("inside a tunnel: 400 with the JSON body", async () => {
    const ph = await f.placeholder("openai");
    const text = await reachesNothing(() =>
      inTunnel(`GET /v1/models HTTP/1.1\r\nAuthorization: Bearer ${ph}\r\nConnection: close\r\n\r\n`),
    );
    expect(brokerError(text)).toMatchObject({ status: 400, code: "bad_request" });
    expect(brokerError(text).message).toContain("Host");
  });

  it("inside a tunnel, HTTP/1.0: the host binding refuses it (421)", async () => {
    const text = await reachesNothing(() => inTunnel("GET /v1/models HTTP/1.0\r\n\r\n"));
    expect(brokerError(text)).toMatchObject({ status: 421, code: "host_mismatch" });
  });

  it("on the listener, a plain-HTTP proxy request: 400 with the JSON body", async () => {
    const text = await reachesNothing(() =>
      rawExchange(f.broker.port, "GET http://example.test/ HTTP/1.1\r\nConnection: close\r\n\r\n"),
    );
    expect(brokerError(text)).toMatchObject({ status: 400, code: "bad_request" });
  });

  it("on the listener, its own endpoints: 400 with the JSON body", async () => {
    const text = await rawExchange(
      f.broker.port,
      "GET /__keybroker/health HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    expect(brokerError(text)).toMatchObject({ status: 400, code: "bad_request" });
  });
});

describe("what node's parser refuses has the broker's shape too", () => {
  const cases: [string, string, number][] = [
    ["garbage", "GARBAGE \x01\x02 nonsense\r\n\r\n", 400],
    ["a bad header line", "GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nBad Header\r\n\r\n", 400],
    ["a space before the colon", "GET /v1/models HTTP/1.1\r\nHost : api.openai.com\r\n\r\n", 400],
    [
      "Content-Length with Transfer-Encoding",
      "POST /v1/x HTTP/1.1\r\nHost: api.openai.com\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      400,
    ],
    [
      "two Content-Lengths",
      "POST /v1/x HTTP/1.1\r\nHost: api.openai.com\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
      400,
    ],
    ["an HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400],
    [
      "oversized headers",
      `GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nX-Big: ${"a".repeat(70_000)}\r\n\r\n`,
      431,
    ],
    // The rest keeps arriving after the 431 was written: each further chunk is another parse
    // error, which must not cut the answer off before TLS has sent it.
    [
      "1 MiB of headers",
      `GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nX-Big: ${"a".repeat(1 << 20)}\r\n\r\n`,
      431,
    ],
    [
      "an unknown Expect",
      "GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nExpect: the-unexpected\r\n\r\n",
      417,
    ],
  ];
  for (const [name, request, status] of cases) {
    it(`${name}, inside a tunnel: ${status}`, async () => {
      const text = await reachesNothing(() => inTunnel(request));
      expect(brokerError(text).status).toBe(status);
    });
    // On the loopback listener the preface starts reverse mode's h2c (docs/http2.md): below.
    if (request.startsWith("PRI ")) continue;
    it(`${name}, on the listener: ${status}`, async () => {
      const onListener = request
        .replace("/v1/", "http://example.test/v1/")
        .replace("api.openai.com", "example.test");
      const text = await reachesNothing(() => rawExchange(f.broker.port, onListener));
      expect(brokerError(text).status).toBe(status);
    });
  }

  it("an HTTP/2 preface then garbage, on the listener: HTTP/2's own refusal (GOAWAY), and the connection closes", async () => {
    const before = f.upstream.received.length;
    const socket = await openSocket(f.broker.port);
    const chunks: Buffer[] = [];
    socket.on("data", (c: Buffer) => chunks.push(c));
    socket.on("error", () => {});
    socket.write("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nGARBAGE, not a SETTINGS frame\r\n\r\n");
    await once(socket, "close");
    expect(f.upstream.received.length).toBe(before);
    const bytes = Buffer.concat(chunks);
    // Frames are 9-byte headers, type at offset 3: find a GOAWAY (7) among what came back.
    let goaway = false;
    for (let i = 0; i + 9 <= bytes.length; i += 9 + bytes.readUIntBE(i, 3))
      if (bytes[i + 3] === 7) goaway = true;
    expect(goaway).toBe(true);
  });

  it("CONNECT inside a tunnel: 400", async () => {
    const text = await reachesNothing(() =>
      inTunnel("CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n"),
    );
    expect(brokerError(text)).toMatchObject({ status: 400, code: "bad_request" });
  });

  it("keeps serving afterwards", async () => {
    const ph = await f.placeholder("openai");
    const text = await inTunnel(
      `GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer ${ph}\r\nConnection: close\r\n\r\n`,
    );
    expect(parseAnswer(text).status).toBe(200);
  });
});
