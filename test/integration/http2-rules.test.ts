// Every rule per HTTP/2 stream (docs/http2.md, decision 155), for the rules http2.test.ts does not
// cover: an OAuth login refreshed after its token got a 401, a pool's fallback provider, a
// guest's role, a client's rpm limit and the /metrics counters. One broker, node:http2 as the
// client (the ALPN checked on each tunnel), an h2-only upstream, and an HTTP/1.1 one for the
// authorization server and the fallback provider.
import { readFileSync } from "node:fs";
import { connect } from "node:http2";
import { join } from "node:path";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileTokenStore } from "../../state/tokens/home.js";
import { findSecrets, outputs, tempHome, writeConfig } from "../helpers/broker.js";
import { AUTH_HOST, type FakeOAuth, installFakeOAuth, storedLogin } from "../helpers/fake-oauth.js";
import { REAL_ANTHROPIC } from "../helpers/fixture.js";
import { h2Request, h2Through } from "../helpers/h2-client.js";
import { type H2Upstream, startH2Upstream } from "../helpers/h2-upstream.js";
import { type InProcessBroker, startInProcessBroker } from "../helpers/in-process.js";
import { agentPlaceholders, placeholderOf } from "../helpers/placeholders.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const OPENAI_KEY_A = "sk-h2rules-openai-aaaaaaaaaaaaaaaaaaaa";
const OPENAI_KEY_B = "sk-h2rules-openai-bbbbbbbbbbbbbbbbbbbb";
const OPENROUTER_KEY = "sk-or-h2rules-cccccccccccccccccccc";
const TOKENS = {
  KB_GUEST_TOKEN: "kb-guest-token-h2rules-1f3e5d7c9b",
  KB_METER_TOKEN: "kb-meter-token-h2rules-2a4c6e8f0d",
  KB_WORKER_TOKEN: "kb-worker-token-h2rules-3b5d7f9a1c",
};
const OAUTH_HOST = "chat.oauth.test";
/** The stored login's access token, which the upstream refuses (it was never issued). */
const REFUSED = "at-refused-upstream-h2rules-0123456789abcdef";
const QUOTA = JSON.stringify({
  error: { type: "insufficient_quota", message: "You exceeded your current quota" },
});

let h2: H2Upstream;
let h1: FakeUpstream;
let fake: FakeOAuth;
let broker: InProcessBroker;
let home: string;

beforeAll(async () => {
  h2 = await startH2Upstream();
  h1 = await startUpstream();
  fake = installFakeOAuth(h1);
  home = tempHome();
  // The login as `auth add` stored it, valid for an hour by its expiry: only a 401 refreshes it.
  const login = fake.login();
  fake.issued.push(REFUSED);
  await new FileTokenStore(home).put(
    storedLogin("chat-oauth", "default", { ...login, access_token: REFUSED }),
  );
  const at = (port: number) => `"127.0.0.1:${port}"`;
  const config = writeConfig(
    tempHome(),
    `version: 1
upstream_ca: [${JSON.stringify(h2.caPath)}, ${JSON.stringify(h1.caPath)}]
resolve:
  "api.openai.com:443": ${at(h2.port)}
  "api.anthropic.com:443": ${at(h2.port)}
  "${OAUTH_HOST}:443": ${at(h2.port)}
  "openrouter.ai:443": ${at(h1.port)}
  "${AUTH_HOST}:443": ${at(h1.port)}
providers:
  openai:
    credentials: [OPENAI_KEY_A, OPENAI_KEY_B]
  openrouter:
    credentials: [OPENROUTER_API_KEY]
  anthropic:
    credentials: [ANTHROPIC_API_KEY]
  chat-oauth:
    hosts: [${OAUTH_HOST}]
    oauth:
      issuer: https://${AUTH_HOST}
      client_id: app_1
      scopes: [openid, offline_access]
fallbacks: { openai: [openrouter] }
clients:
  default: { providers: "*" }
  visitor: { token: KB_GUEST_TOKEN, providers: [anthropic], role: guest }
  meter: { token: KB_METER_TOKEN, providers: [anthropic], limits: { rpm: 3 } }
  worker: { token: KB_WORKER_TOKEN, providers: [anthropic] }
`,
  );
  broker = await startInProcessBroker({
    home,
    config,
    env: {
      OPENAI_KEY_A,
      OPENAI_KEY_B,
      OPENROUTER_API_KEY: OPENROUTER_KEY,
      ANTHROPIC_API_KEY: REAL_ANTHROPIC,
      ...TOKENS,
    },
  });
});

afterAll(async () => {
  await broker?.stop();
  await h2?.close();
  await h1?.close();
  const written = [...outputs, broker.stderr()];
  const keys = [OPENAI_KEY_A, OPENAI_KEY_B, OPENROUTER_KEY, REAL_ANTHROPIC, ...Object.values(TOKENS)];
  expect(findSecrets(keys, [home], written)).toEqual([]);
  // The login's tokens belong in the token store, and nowhere else.
  const store = join(home, "tokens");
  expect(findSecrets(fake.issued, [home], written, (file) => file.startsWith(store))).toEqual([]);
});

/** `client`'s anthropic placeholder. */
function anthropicOf(client: string): string {
  return placeholderOf(agentPlaceholders(broker.broker.runtime, client), "anthropic");
}

/** An intercepted HTTP/2 session to `host`, opened as `client` ("name:token"); h2Through checks the ALPN. */
async function session(host: string, client?: string) {
  const s = await h2Through(broker.port, host, broker.bundlePath, client);
  expect(s.tls.alpnProtocol).toBe("h2");
  return {
    session: s.session,
    close() {
      s.session.close();
      s.tls.destroy();
    },
  };
}

/** keybroker_requests_total's samples for `client`, keyed by their other labels sorted. */
async function requestCounts(client: string): Promise<Record<string, number>> {
  const token = readFileSync(join(home, "admin.token"), "utf8").trim();
  const res = await request(`${broker.url}/metrics`, { headers: { authorization: `Bearer ${token}` } });
  expect(res.statusCode).toBe(200);
  const out: Record<string, number> = {};
  for (const line of (await res.body.text()).split("\n")) {
    const m = /^keybroker_requests_total\{(.*)\} (\S+)$/.exec(line);
    if (m === null) continue;
    const labels = [...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1]!, l[2]!] as const);
    if (!labels.some(([k, v]) => k === "client" && v === client)) continue;
    const rest = labels.filter(([k]) => k !== "client").map(([k, v]) => `${k}=${v}`);
    out[rest.sort().join(",")] = Number(m[2]);
  }
  return out;
}

describe("rules per HTTP/2 stream", () => {
  it("refreshes an OAuth login whose token got a 401 and sends the stream again: the client sees 200", async () => {
    h2.routes.set("/v1/chat", (stream, headers) => {
      const token = String(headers.authorization ?? "").replace(/^Bearer /, "");
      const ok = fake.valid(token);
      stream.respond({ ":status": ok ? 200 : 401, "content-type": "application/json" });
      stream.end(JSON.stringify(ok ? { ok: true } : { error: { message: "invalid token" } }));
    });
    const vars = agentPlaceholders(broker.broker.runtime, "default");
    const placeholder = vars.CHAT_OAUTH_ACCESS_TOKEN;
    expect(placeholder, Object.keys(vars).join(", ")).toBeDefined();
    const s = await session(OAUTH_HOST);
    const body = '{"model":"gpt-test"}';
    const a = await h2Request(
      s.session,
      {
        ":method": "POST",
        ":path": "/v1/chat",
        authorization: `Bearer ${placeholder}`,
        "content-type": "application/json",
        "content-length": String(body.length),
      },
      body,
    );
    s.close();
    expect(a.status, a.body).toBe(200);
    expect(JSON.parse(a.body)).toEqual({ ok: true });
    expect(fake.refreshes).toBe(1);
    const tries = h2.received.filter((g) => g.headers[":authority"] === OAUTH_HOST);
    expect(tries.map((g) => g.headers.authorization)).toEqual([
      `Bearer ${REFUSED}`,
      expect.stringMatching(/^Bearer at-/),
    ]);
    expect(fake.valid(String(tries[1]!.headers.authorization).slice(7))).toBe(true);
    expect(tries.map((g) => g.body.toString())).toEqual([body, body]);
  });

  it("falls back to another provider (on an HTTP/1.1 upstream) when the pool's h2 upstream refuses every key (h2c, reverse mode)", async () => {
    const seen: string[] = [];
    h2.routes.set("/v1/chat/completions", (stream, headers) => {
      seen.push(String(headers.authorization ?? "").replace(/^Bearer /, ""));
      stream.respond({ ":status": 429, "content-type": "application/json", "retry-after": "120" });
      stream.end(QUOTA);
    });
    h1.routes.set("POST /api/v1/chat/completions", (_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ ok: true, via: "openrouter" }));
    });
    const c = connect(broker.url);
    c.on("error", () => {});
    const body = '{"model":"gpt-test"}';
    const a = await h2Request(
      c,
      {
        ":method": "POST",
        ":path": "/p/openai/v1/chat/completions",
        authorization: "Bearer dummy",
        "content-type": "application/json",
        "content-length": String(body.length),
      },
      body,
    );
    expect(c.alpnProtocol).toBe("h2c");
    c.close();
    expect(a.status, a.body).toBe(200);
    expect(JSON.parse(a.body)).toEqual({ ok: true, via: "openrouter" });
    expect([...seen].sort()).toEqual([OPENAI_KEY_A, OPENAI_KEY_B]);
    const or = h1.received.filter((r) => r.host === "openrouter.ai");
    expect(or).toHaveLength(1);
    expect(or[0]!.url).toBe("/api/v1/chat/completions");
    expect(or[0]!.headers.authorization).toBe(`Bearer ${OPENROUTER_KEY}`);
    expect(or[0]!.body.toString()).toBe(body);
  });

  it("refuses a guest's POST with 403 while its GET on the same connection passes", async () => {
    const ph = anthropicOf("visitor");
    const s = await session("api.anthropic.com", `visitor:${TOKENS.KB_GUEST_TOKEN}`);
    const before = h2.received.length;
    const [post, get] = await Promise.all([
      h2Request(
        s.session,
        {
          ":method": "POST",
          ":path": "/v1/messages",
          "x-api-key": ph,
          "content-type": "application/json",
          "content-length": "2",
        },
        "{}",
      ),
      h2Request(s.session, { ":method": "GET", ":path": "/v1/models", "x-api-key": ph }),
    ]);
    s.close();
    expect(post.status).toBe(403);
    expect(JSON.parse(post.body).error.type).toBe("policy_denied");
    expect(post.body).toContain('client \\"visitor\\" is a guest');
    expect(get.status).toBe(200);
    expect(JSON.parse(get.body).protocol).toBe("h2");
    const got = h2.received.slice(before);
    expect(got.map((g) => [g.headers[":method"], g.headers[":path"]])).toEqual([["GET", "/v1/models"]]);
    expect(got[0]!.headers["x-api-key"]).toBe(REAL_ANTHROPIC);
  });

  it("limits.rpm: the stream over the limit gets 429; a stream already open on the connection finishes", async () => {
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    h2.streaming.set("/v1/slow", (stream) => {
      stream.respond({ ":status": 200, "content-type": "text/plain" });
      stream.write("first part");
      void released.then(() => stream.end(", then the rest"));
    });
    const ph = anthropicOf("meter");
    const s = await session("api.anthropic.com", `meter:${TOKENS.KB_METER_TOKEN}`);
    const before = h2.received.length;
    // Stream 1 stays open upstream: the broker counted it when it sent it.
    const slow = h2Request(s.session, { ":method": "GET", ":path": "/v1/slow", "x-api-key": ph });
    await expect
      .poll(() => h2.received.slice(before).some((g) => g.headers[":path"] === "/v1/slow"), {
        timeout: 10_000,
      })
      .toBe(true);
    const get = () => h2Request(s.session, { ":method": "GET", ":path": "/v1/models", "x-api-key": ph });
    expect((await get()).status).toBe(200);
    expect((await get()).status).toBe(200);
    const over = await get();
    expect(over.status).toBe(429);
    expect(JSON.parse(over.body).error.type).toBe("client_rate_limited");
    expect(over.headers["retry-after"]).toMatch(/^\d+$/);
    expect(h2.received.slice(before).map((g) => g.headers[":path"])).toEqual([
      "/v1/slow",
      "/v1/models",
      "/v1/models",
    ]);
    // The refusal was that stream's alone: the session and its open stream go on.
    expect(s.session.closed).toBe(false);
    release();
    const done = await slow;
    s.close();
    expect(done.status).toBe(200);
    expect(done.body).toBe("first part, then the rest");
    expect(done.rstCode).toBe(0);
  });

  it("/metrics counts each stream of one connection under its client, provider and status class", async () => {
    h2.routes.set("/v1/fail", (stream) => {
      stream.respond({ ":status": 503, "content-type": "application/json" });
      stream.end('{"error":{"type":"overloaded"}}');
    });
    const before = await requestCounts("worker");
    expect(before).toEqual({});
    const ph = anthropicOf("worker");
    const s = await session("api.anthropic.com", `worker:${TOKENS.KB_WORKER_TOKEN}`);
    const answers = await Promise.all([
      ...[0, 1, 2].map((i) =>
        h2Request(s.session, { ":method": "GET", ":path": `/v1/models?i=${i}`, "x-api-key": ph }),
      ),
      h2Request(s.session, { ":method": "GET", ":path": "/v1/fail", "x-api-key": ph }),
    ]);
    s.close();
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 503]);
    await expect
      .poll(() => requestCounts("worker"), { timeout: 10_000 })
      .toEqual({
        "decision=injected,provider=anthropic,status=2xx": 3,
        "decision=injected,provider=anthropic,status=5xx": 1,
      });
  });
});
