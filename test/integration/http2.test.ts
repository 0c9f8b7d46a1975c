// HTTP/2 through the intercept (docs/spec.md §13, docs/http2.md): ALPN h2 for a client that offers it
// when the origin speaks HTTP/2, and every rule applied to each stream as to an HTTP/1.1
// request, with real clients (curl --http2, undici with allowH2, node:http2) and an h2-only
// upstream beside an HTTP/1.1-only one.
import { existsSync, readFileSync } from "node:fs";
import { connect } from "node:http2";
import { join } from "node:path";
import { ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type CliResult,
  findSecrets,
  outputs,
  runProcess,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { REAL_ANTHROPIC, REAL_GITHUB, REAL_OPENAI } from "../helpers/fixture.js";
import { h2Request, h2Through } from "../helpers/h2-client.js";
import { type H2Upstream, startH2Upstream } from "../helpers/h2-upstream.js";
import { type InProcessBroker, startInProcessBroker } from "../helpers/in-process.js";
import { agentPlaceholders, placeholderOf } from "../helpers/placeholders.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const REAL_OPENAI_B = "sk-real-openai-second-0a1b2c3d4e5f6a7b8c9d0e1f";

let h2: H2Upstream;
let h1: FakeUpstream;
let broker: InProcessBroker;
let home: string;
let openai: string;
let anthropic: string;
let github: string;

beforeAll(async () => {
  h2 = await startH2Upstream();
  h1 = await startUpstream();
  home = tempHome();
  const dir = tempHome();
  const config = writeConfig(
    dir,
    `version: 1
upstream_ca: [${JSON.stringify(h2.caPath)}, ${JSON.stringify(h1.caPath)}]
resolve:
  "api.openai.com:443": "127.0.0.1:${h2.port}"
  "api.github.com:443": "127.0.0.1:${h2.port}"
  "api.anthropic.com:443": "127.0.0.1:${h1.port}"
providers:
  openai:
    credentials: [OPENAI_API_KEY, OPENAI_KEY_B]
    policy:
      - deny: { method: DELETE, path: "/v1/files/**" }
      - approve: { method: POST, path: "/v1/held" }
  anthropic:
    credentials: [ANTHROPIC_API_KEY]
  github:
    hosts: [api.github.com]
    inject: { basic: { username: x-access-token } }
    placeholder: { env: GITHUB_TOKEN }
    credentials: [GITHUB_TOKEN]
`,
  );
  broker = await startInProcessBroker({
    home,
    config,
    env: {
      OPENAI_API_KEY: REAL_OPENAI,
      OPENAI_KEY_B: REAL_OPENAI_B,
      ANTHROPIC_API_KEY: REAL_ANTHROPIC,
      GITHUB_TOKEN: REAL_GITHUB,
    },
  });
  const ph = agentPlaceholders(broker.broker.runtime, "default");
  openai = placeholderOf(ph, "openai");
  anthropic = placeholderOf(ph, "anthropic");
  github = placeholderOf(ph, "github");
  // An upstream that echoes the credential in a header, the body and a trailer.
  h2.routes.set("/v1/echo", (stream, headers) => {
    const auth = String(headers.authorization);
    stream.respond(
      { ":status": 200, "content-type": "text/plain", "x-echo": auth },
      { waitForTrailers: true },
    );
    stream.once("wantTrailers", () => stream.sendTrailers({ "x-echo-trailer": auth }));
    stream.end(`you sent ${auth}`);
  });
});

afterAll(async () => {
  await broker?.stop();
  await h2?.close();
  await h1?.close();
  expect(
    findSecrets(
      [REAL_OPENAI, REAL_OPENAI_B, REAL_ANTHROPIC, REAL_GITHUB],
      [home],
      [...outputs, broker.stderr()],
    ),
  ).toEqual([]);
});

function curl(args: string[]): Promise<CliResult> {
  return runProcess("curl", ["-sS", "-x", broker.url, "--cacert", broker.bundlePath, ...args]);
}

function auditLines(): Record<string, unknown>[] {
  const file = join(home, "audit", "audit.jsonl");
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe("HTTP/2 on the intercept", () => {
  it("curl --http2 negotiates h2 with an h2 origin; the stream gets the credential, the echo is scrubbed", async () => {
    const r = await curl([
      "--http2",
      "-H",
      `Authorization: Bearer ${openai}`,
      "https://api.openai.com/v1/echo",
      "-w",
      "\n%{http_version} %{http_code}",
    ]);
    const [body, last] = [r.stdout.slice(0, r.stdout.lastIndexOf("\n")), r.stdout.split("\n").at(-1)];
    expect(last).toBe("2 200");
    expect(body).toBe(`you sent Bearer ${openai}`);
    const got = h2.received.at(-1)!;
    expect(got.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    expect(got.headers[":authority"]).toBe("api.openai.com");
    expect(h2.protocols.every((p) => p === "h2")).toBe(true);
    await expect
      .poll(() => auditLines().filter((l) => l.decision === "injected" && l.path === "/v1/echo").length)
      .toBe(1);
  });

  it("scrubs the echo from response headers and trailers too (node:http2 client)", async () => {
    const { session, tls } = await h2Through(broker.port, "api.openai.com", broker.bundlePath);
    const a = await h2Request(session, {
      ":method": "GET",
      ":path": "/v1/echo",
      authorization: `Bearer ${openai}`,
    });
    session.close();
    tls.destroy();
    expect(a.status).toBe(200);
    expect(a.headers["x-echo"]).toBe(`Bearer ${openai}`);
    expect(a.trailers["x-echo-trailer"]).toBe(`Bearer ${openai}`);
  });

  it("runs many streams on one connection, each injected (undici with allowH2)", async () => {
    const agent = new ProxyAgent({
      uri: broker.url,
      allowH2: true,
      requestTls: { ca: readFileSync(broker.bundlePath, "utf8"), allowH2: true } as never,
    });
    const before = h2.received.length;
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        request(`https://api.openai.com/v1/models?i=${i}`, {
          dispatcher: agent,
          headers: { authorization: `Bearer ${openai}` },
        }).then(async (r) => ({ status: r.statusCode, body: await r.body.text() })),
      ),
    );
    await agent.close();
    expect(answers.map((a) => a.status)).toEqual(Array(8).fill(200));
    expect(answers.every((a) => JSON.parse(a.body).protocol === "h2")).toBe(true);
    const got = h2.received.slice(before);
    expect(got).toHaveLength(8);
    expect(got.every((g) => g.headers.authorization === `Bearer ${REAL_OPENAI}`)).toBe(true);
  });

  it("injects Basic credentials and applies policy per stream", async () => {
    const { session, tls } = await h2Through(broker.port, "api.github.com", broker.bundlePath);
    const basic = `Basic ${Buffer.from(`x-access-token:${github}`).toString("base64")}`;
    const ok = await h2Request(session, { ":method": "GET", ":path": "/user", authorization: basic });
    const { session: s2, tls: t2 } = await h2Through(broker.port, "api.openai.com", broker.bundlePath);
    const before = h2.received.length;
    const denied = await h2Request(s2, {
      ":method": "DELETE",
      ":path": "/v1/files/abc",
      authorization: `Bearer ${openai}`,
    });
    for (const s of [session, s2]) s.close();
    for (const t of [tls, t2]) t.destroy();
    expect(ok.status).toBe(200);
    expect(h2.received.at(-1)?.headers.authorization).toBe(
      `Basic ${Buffer.from(`x-access-token:${REAL_GITHUB}`).toString("base64")}`,
    );
    expect(denied.status).toBe(403);
    expect(JSON.parse(denied.body).error.type).toBe("policy_denied");
    expect(h2.received.length).toBe(before);
  });

  it("refuses a stream whose :authority is not the tunnel's host, sending nothing", async () => {
    const { session, tls } = await h2Through(broker.port, "api.openai.com", broker.bundlePath);
    const before = h2.received.length;
    const a = await h2Request(session, {
      ":method": "GET",
      ":path": "/v1/models",
      ":authority": "evil.example",
      authorization: `Bearer ${openai}`,
    });
    // The connection goes on serving its other streams.
    const b = await h2Request(session, {
      ":method": "GET",
      ":path": "/v1/models",
      authorization: `Bearer ${openai}`,
    });
    session.close();
    tls.destroy();
    expect(a.status).toBe(421);
    expect(JSON.parse(a.body).error.type).toBe("host_mismatch");
    expect(b.status).toBe(200);
    expect(h2.received.length).toBe(before + 1);
  });

  it("holds a stream for approval while the connection's other streams go on", async () => {
    const { session, tls } = await h2Through(broker.port, "api.openai.com", broker.bundlePath);
    const held = h2Request(
      session,
      {
        ":method": "POST",
        ":path": "/v1/held",
        authorization: `Bearer ${openai}`,
        "content-type": "application/json",
      },
      '{"x":1}',
    );
    const token = readFileSync(join(home, "admin.token"), "utf8").trim();
    const admin = { authorization: `Bearer ${token}` };
    let waiting: { id: string }[] = [];
    await expect
      .poll(async () => {
        const r = await request(`${broker.url}/__keybroker/admin/approvals`, { headers: admin });
        waiting = ((await r.body.json()) as { approvals: { id: string }[] }).approvals;
        return waiting.length;
      })
      .toBe(1);
    const other = await h2Request(session, {
      ":method": "GET",
      ":path": "/v1/models",
      authorization: `Bearer ${openai}`,
    });
    expect(other.status).toBe(200);
    const ok = await request(`${broker.url}/__keybroker/admin/approvals/${waiting[0]!.id}/approve`, {
      method: "POST",
      headers: admin,
    });
    await ok.body.dump();
    const a = await held;
    session.close();
    tls.destroy();
    expect(a.status).toBe(200);
    expect(h2.received.at(-1)?.body.toString()).toBe('{"x":1}');
  });

  it("marks a credential that hit its quota and retries the stream on the next one before answering", async () => {
    h2.routes.set("/v1/quota", (stream, headers) => {
      if (headers.authorization === `Bearer ${REAL_OPENAI}`) {
        stream.respond({ ":status": 429, "content-type": "application/json", "retry-after": "60" });
        stream.end('{"error":{"type":"rate_limit"}}');
        return;
      }
      stream.respond({ ":status": 200, "content-type": "application/json" });
      stream.end('{"ok":true}');
    });
    const r = await curl([
      "--http2",
      "-H",
      `Authorization: Bearer ${openai}`,
      "-H",
      "content-type: application/json",
      "-d",
      '{"q":1}',
      "https://api.openai.com/v1/quota",
      "-w",
      "\n%{http_version} %{http_code}",
    ]);
    expect(r.stdout.split("\n").at(-1)).toBe("2 200");
    const tries = h2.received.filter((g) => g.headers[":path"] === "/v1/quota");
    expect(tries.map((g) => g.headers.authorization)).toEqual([
      `Bearer ${REAL_OPENAI}`,
      `Bearer ${REAL_OPENAI_B}`,
    ]);
    expect(tries.map((g) => g.body.toString())).toEqual(['{"q":1}', '{"q":1}']);
  });

  it("passes an upstream's RST_STREAM code on to the client's stream", async () => {
    // While the request is still open, so the reset is not preceded by the answer's end.
    h2.streaming.set("/v1/reset", (stream) => {
      stream.respond({ ":status": 200, "content-type": "text/plain" });
      stream.write("partial", () => stream.close(11));
    });
    const { session, tls } = await h2Through(broker.port, "api.openai.com", broker.bundlePath);
    const s = session.request({ ":method": "POST", ":path": "/v1/reset", authorization: `Bearer ${openai}` });
    s.on("error", () => {});
    s.on("data", () => {});
    const closed = new Promise((resolve) => s.once("close", resolve));
    s.write("still sending");
    await closed;
    session.close();
    tls.destroy();
    // ENHANCE_YOUR_CALM, not the INTERNAL_ERROR of a broken answer.
    expect(s.rstCode).toBe(11);
  });

  it("offers only http/1.1 for an HTTP/1.1-only origin, and serves it", async () => {
    const r = await curl([
      "--http2",
      "-H",
      `x-api-key: ${anthropic}`,
      "https://api.anthropic.com/v1/models",
      "-w",
      "\n%{http_version} %{http_code}",
    ]);
    expect(r.stdout.split("\n").at(-1)).toBe("1.1 200");
    expect(h1.received.at(-1)?.headers["x-api-key"]).toBe(REAL_ANTHROPIC);
  });

  it("serves an HTTP/1.1 client from an h2-only origin (curl --http1.1)", async () => {
    const r = await curl([
      "--http1.1",
      "-H",
      `Authorization: Bearer ${openai}`,
      "-H",
      "Cookie: a=1",
      "https://api.openai.com/v1/models",
      "-w",
      "\n%{http_version} %{http_code}",
    ]);
    expect(r.stdout.split("\n").at(-1)).toBe("1.1 200");
    // The pool's second key: the quota test above marked the first.
    expect(h2.received.at(-1)?.headers.authorization).toBe(`Bearer ${REAL_OPENAI_B}`);
    expect(h2.received.at(-1)?.headers.connection).toBeUndefined();
  });
});

describe("HTTP/2 with prior knowledge (h2c) in reverse mode", () => {
  it("serves /p/<id> over h2c: injected toward an h2 upstream, bridged to an HTTP/1.1 one", async () => {
    const session = connect(broker.url);
    session.on("error", () => {});
    const a = await h2Request(session, {
      ":method": "GET",
      ":path": "/p/openai/v1/models",
      authorization: `Bearer ${openai}`,
    });
    expect(a.status, a.body).toBe(200);
    expect(h2.received.at(-1)?.headers[":path"]).toBe("/v1/models");
    expect(String(h2.received.at(-1)?.headers.authorization)).toMatch(/^Bearer sk-real-openai/);
    const before = h1.received.length;
    const b = await h2Request(session, {
      ":method": "GET",
      ":path": "/p/anthropic/v1/models",
      "x-api-key": anthropic,
      cookie: ["a=1", "b=2"] as unknown as string,
    });
    session.close();
    expect(b.status).toBe(200);
    expect(h1.received.length).toBe(before + 1);
    const got = h1.received.at(-1)!;
    expect(got.headers["x-api-key"]).toBe(REAL_ANTHROPIC);
    expect(got.headers.cookie).toBe("a=1; b=2");
    expect(got.headers.host).toBe("api.anthropic.com");
  });

  it("leaves HTTP/1.1 on the same port as it was", async () => {
    const r = await request(`${broker.url}/p/anthropic/v1/models`, { headers: { "x-api-key": anthropic } });
    expect(r.statusCode).toBe(200);
    await r.body.dump();
  });
});
