// GET /metrics (docs/spec.md §18): real clients make a known set of requests through a real broker
// (successes, an upstream 5xx, a blocked exfiltration attempt, a 429 that marks a credential
// and is retried on another), then the scrape must have moved by exactly those requests, pass
// `promtool check metrics`, hold no secret, and be refused to a caller off this machine that
// has no admin token.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { networkInterfaces } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { type ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileTokenStore } from "../../state/tokens/home.js";
import { type BrokerProcess, findSecrets, startBroker, tempHome, writeConfig } from "../helpers/broker.js";
import { AUTH_HOST, type FakeOAuth, installFakeOAuth, storedLogin } from "../helpers/fake-oauth.js";
import { HOSTS, sendBlockedRequest } from "../helpers/fixture.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import type { FakeUpstream } from "../helpers/upstream.js";

const KEY_A = "sk-metrics-aaaaaaaaaaaaaaaaaaaaaaaa";
const KEY_B = "sk-metrics-bbbbbbbbbbbbbbbbbbbbbbbb";
const AGENT_TOKEN = "kb-agent-token-metrics-0123456789abcdef";
const OPS_TOKEN = "kb-ops-token-metrics-fedcba9876543210";
const OK_BODY = JSON.stringify({ id: "chatcmpl-metrics", choices: [{ message: { content: "hi" } }] });
const FAIL_BODY = JSON.stringify({ error: { type: "overloaded", message: "try later" } });
const REQUEST_BODY = JSON.stringify({ model: "gpt-test", messages: [{ role: "user", content: "hi" }] });

function rules(u: FakeUpstream): string {
  const resolve = HOSTS.map((h) => `  "${h}:443": "127.0.0.1:${u.port}"`).join("\n");
  return `version: 1
upstream_ca: [${JSON.stringify(u.caPath)}]
resolve:
${resolve}
  "${AUTH_HOST}:443": "127.0.0.1:${u.port}"
providers:
  openai:
    credentials: [KEY_A, KEY_B]
    policy:
      - approve: { method: POST, path: "/v1/held" }
      - approve: { method: POST, path: "/v1/late", timeout: 1s }
  anthropic:
    credentials: [ANTHROPIC_API_KEY]
  tool-oauth:
    hosts: [tunnel.test]
    oauth:
      issuer: https://${AUTH_HOST}
      client_id: app_1
      scopes: [openid, offline_access]
`;
}

/** A scrape as series → value, the labels of each series sorted (their order is not the format's). */
type Scrape = Map<string, number>;

function parse(text: string): Scrape {
  const out: Scrape = new Map();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels = [...(m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => `${l[1]}=${l[2]}`);
    out.set(`${m[1]}{${labels.sort().join(",")}}`, Number(m[3]));
  }
  return out;
}

/** The series key `parse` makes. */
function key(name: string, labels: Record<string, string> = {}): string {
  const parts = Object.entries(labels).map(([k, v]) => `${k}=${v}`);
  return `${name}{${parts.sort().join(",")}}`;
}

/** How much every series of `name` moved between two scrapes (series that did not move left out). */
function moved(before: Scrape, after: Scrape, name: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of after) {
    if (!k.startsWith(`${name}{`)) continue;
    const d = v - (before.get(k) ?? 0);
    if (d !== 0) out[k] = d;
  }
  return out;
}

async function scrape(url: string, headers: Record<string, string> = {}) {
  const res = await request(`${url}/metrics`, { headers });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

let f: InProcessFixture;
let agent: ProxyAgent;
let adminToken: string;
let fake: FakeOAuth;
const upstreamSeen: string[] = [];

/** The broker of the last describe, listening on 0.0.0.0: started beside the fixture's. */
const remoteHome = tempHome();
let remoteStarted: Promise<BrokerProcess>;

beforeAll(async () => {
  const config = writeConfig(
    tempHome(),
    `version: 1\nlisten: "0.0.0.0:0"\nclients:\n  agent: { token: KB_AGENT_TOKEN, providers: '*' }\n  ops: { token: KB_OPS_TOKEN, role: admin }\n`,
  );
  remoteStarted = startBroker({
    home: remoteHome,
    config,
    env: { KB_AGENT_TOKEN: AGENT_TOKEN, KB_OPS_TOKEN: OPS_TOKEN },
  });
  // Awaited by the last describe; until then a failed start must not be an unhandled rejection.
  remoteStarted.catch(() => {});
  f = await startInProcessFixture({
    rules: (u) => {
      fake = installFakeOAuth(u);
      return rules(u);
    },
    env: { KEY_A, KEY_B },
  });
  f.upstream.routes.set("POST /v1/chat/completions", (req: IncomingMessage, res: ServerResponse) => {
    const key = String(req.headers.authorization ?? "").replace(/^Bearer /, "");
    upstreamSeen.push(key);
    if (key === KEY_A) {
      res.writeHead(429, { "content-type": "application/json", "retry-after": "600" });
      res.end(JSON.stringify({ error: { type: "insufficient_quota", message: "quota" } }));
      return;
    }
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(OK_BODY) });
    res.end(OK_BODY);
  });
  f.upstream.routes.set("POST /v1/messages", (_req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(503, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(FAIL_BODY),
    });
    res.end(FAIL_BODY);
  });
  agent = f.proxyAgent();
  adminToken = readFileSync(join(f.home, "admin.token"), "utf8").trim();
});

afterAll(async () => {
  await agent?.close();
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

describe("GET /metrics", () => {
  it("moves by exactly the requests made, passes promtool and holds no secret", async () => {
    const first = await scrape(f.broker.url);
    expect(first.status).toBe(200);
    expect(first.headers["content-type"]).toMatch(/^text\/plain; version=0\.0\.4/);
    const before = parse(first.text);

    const openai = await f.placeholder("openai");
    const anthropic = await f.placeholder("anthropic");
    const post = async (url: string, headers: Record<string, string>) => {
      const res = await request(url, {
        method: "POST",
        dispatcher: agent,
        headers: { "content-type": "application/json", ...headers },
        body: REQUEST_BODY,
      });
      return { status: res.statusCode, body: await res.body.text() };
    };
    const chat = () =>
      post("https://api.openai.com/v1/chat/completions", { authorization: `Bearer ${openai}` });
    const messages = () => post("https://api.anthropic.com/v1/messages", { "x-api-key": anthropic });

    // 1: KEY_A answers 429 (marked), the request is sent again on KEY_B (a retry): 200.
    expect(await chat()).toEqual({ status: 200, body: OK_BODY });
    expect(upstreamSeen).toEqual([KEY_A, KEY_B]);
    // 2, 3: straight to KEY_B.
    expect((await chat()).status).toBe(200);
    expect((await chat()).status).toBe(200);
    // 4, 5: the upstream fails.
    expect(await messages()).toEqual({ status: 503, body: FAIL_BODY });
    expect((await messages()).status).toBe(503);
    // 6: the openai placeholder sent to api.anthropic.com: blocked, nothing sent.
    expect(await sendBlockedRequest(agent, openai)).toBe(403);
    expect(upstreamSeen).toHaveLength(4);

    const second = await scrape(f.broker.url);
    expect(second.status).toBe(200);
    const after = parse(second.text);
    const base = { client: "default" };
    expect(moved(before, after, "keybroker_requests_total")).toEqual({
      [key("keybroker_requests_total", {
        ...base,
        provider: "openai",
        decision: "injected",
        status: "2xx",
      })]: 3,
      [key("keybroker_requests_total", {
        ...base,
        provider: "anthropic",
        decision: "injected",
        status: "5xx",
      })]: 2,
      // api.anthropic.com is shared by the anthropic key provider and the catalogue's
      // claude-oauth subscription (decision 160), so a request carrying another provider's
      // placeholder there matches no provider of the host: provider="" (docs/metrics.md).
      [key("keybroker_requests_total", {
        ...base,
        provider: "",
        decision: "blocked",
        status: "4xx",
      })]: 1,
    });
    expect(moved(before, after, "keybroker_marks_total")).toEqual({
      [key("keybroker_marks_total", { provider: "openai", credential: "KEY_A" })]: 1,
    });
    expect(moved(before, after, "keybroker_retries_total")).toEqual({
      [key("keybroker_retries_total", { provider: "openai" })]: 1,
    });
    expect(moved(before, after, "keybroker_fallbacks_total")).toEqual({});
    expect(moved(before, after, "keybroker_exfiltration_blocked_total")).toEqual({
      [key("keybroker_exfiltration_blocked_total", {
        client: "default",
        code: "placeholder_host_mismatch",
      })]: 1,
    });
    // Bytes each way: the request bodies of the five forwarded requests (once each, however
    // many attempts), and the answers that reached the clients.
    const bodyBytes = Buffer.byteLength(REQUEST_BODY);
    expect(moved(before, after, "keybroker_upstream_sent_bytes_total")).toEqual({
      [key("keybroker_upstream_sent_bytes_total", { ...base, provider: "openai" })]: 3 * bodyBytes,
      [key("keybroker_upstream_sent_bytes_total", { ...base, provider: "anthropic" })]: 2 * bodyBytes,
    });
    expect(moved(before, after, "keybroker_upstream_received_bytes_total")).toEqual({
      [key("keybroker_upstream_received_bytes_total", { ...base, provider: "openai" })]:
        3 * Buffer.byteLength(OK_BODY),
      [key("keybroker_upstream_received_bytes_total", { ...base, provider: "anthropic" })]:
        2 * Buffer.byteLength(FAIL_BODY),
    });
    // Both histograms saw each forwarded request once; the blocked one has no upstream time.
    for (const name of ["keybroker_upstream_seconds", "keybroker_overhead_seconds"]) {
      expect(moved(before, after, `${name}_count`)).toEqual({
        [key(`${name}_count`, { provider: "openai" })]: 3,
        [key(`${name}_count`, { provider: "anthropic" })]: 2,
      });
      expect(after.get(key(`${name}_bucket`, { provider: "openai", le: "+Inf" }))).toBe(3);
      expect(after.get(key(`${name}_sum`, { provider: "openai" }))).toBeGreaterThan(0);
    }
    // Buckets are cumulative: never less than the one before.
    const buckets = [...after]
      .filter(([k]) => k.startsWith("keybroker_upstream_seconds_bucket{") && k.includes("provider=openai"))
      .map(([, v]) => v);
    expect(buckets.length).toBeGreaterThan(5);
    expect([...buckets].sort((a, b) => a - b)).toEqual(buckets.slice().sort((a, b) => a - b));
    expect(Math.max(...buckets)).toBe(3);

    const state = (credential: string, s: string, provider = "openai") =>
      after.get(key("keybroker_credential_state", { provider, credential, state: s }));
    expect(state("KEY_A", "usage_limit_reached")).toBe(1);
    expect(state("KEY_A", "ok")).toBe(0);
    expect(state("KEY_B", "ok")).toBe(1);
    expect(state("ANTHROPIC_API_KEY", "ok", "anthropic")).toBe(1);
    expect(after.get(key("keybroker_approvals_pending"))).toBe(0);
    expect(after.get(key("process_cpu_user_seconds_total"))).toBeGreaterThan(0);
    expect(after.has(key("nodejs_heap_size_used_bytes"))).toBe(true);

    // The real output passes Prometheus's own checker, with nothing to say.
    const lint = spawnSync("promtool", ["check", "metrics"], { input: second.text, encoding: "utf8" });
    expect(lint.error).toBeUndefined();
    expect({ status: lint.status, out: lint.stdout + lint.stderr }).toEqual({ status: 0, out: "" });

    // Ids only: no key, placeholder or token value in what /metrics says.
    expect(findSecrets([KEY_A, KEY_B, adminToken, openai, anthropic], [], [first.text, second.text])).toEqual(
      [],
    );
  });

  it("answers the admin token, refuses a wrong one with a JSON error, and refuses web pages", async () => {
    const ok = await scrape(f.broker.url, { authorization: `Bearer ${adminToken}` });
    expect(ok.status).toBe(200);
    expect(ok.text).toContain("# TYPE keybroker_requests_total counter");

    const wrong = await scrape(f.broker.url, { authorization: "Bearer not-the-admin-token" });
    expect(wrong.status).toBe(403);
    expect(wrong.headers["x-keybroker-error"]).toBe("policy_denied");
    const error = (JSON.parse(wrong.text) as { error: { type: string; message: string; hint: string } })
      .error;
    expect(error.type).toBe("policy_denied");
    expect(error.message).toContain("admin token");
    expect(error.hint).toContain("admin.token");

    // A page in a browser (or a name rebound onto 127.0.0.1) gets nothing without a token.
    const page = await scrape(f.broker.url, { "sec-fetch-site": "cross-site" });
    expect(page.status).toBe(400);
    const rebound = await request(`${f.broker.url}/metrics`, { headers: { host: "attacker.example" } });
    expect(rebound.statusCode).toBe(400);
    await rebound.body.text();

    const post = await request(`${f.broker.url}/metrics`, { method: "POST", body: "{}" });
    expect(post.statusCode).toBe(400);
    expect(await post.body.text()).toContain("GET /metrics");
  });
});

describe("approvals in /metrics", () => {
  it("shows a held request as pending, then counts how it was answered", async () => {
    const before = parse((await scrape(f.broker.url)).text);
    const openai = await f.placeholder("openai");
    const send = (path: string) =>
      request(`https://api.openai.com${path}`, {
        method: "POST",
        dispatcher: agent,
        headers: { authorization: `Bearer ${openai}`, "content-type": "application/json" },
        body: REQUEST_BODY,
      }).then(async (res) => ({
        status: res.statusCode,
        code: res.headers["x-keybroker-error"],
        body: await res.body.text(),
      }));
    const admin = { authorization: `Bearer ${adminToken}` };
    const held = send("/v1/held");
    let list: { id: string }[] = [];
    while (list.length === 0) {
      const res = await request(`${f.broker.url}/__keybroker/admin/approvals`, { headers: admin });
      list = ((await res.body.json()) as { approvals: { id: string }[] }).approvals;
    }
    const pending = parse((await scrape(f.broker.url)).text);
    expect(pending.get(key("keybroker_approvals_pending"))).toBe(1);
    const deny = await request(`${f.broker.url}/__keybroker/admin/approvals/${list[0]!.id}/deny`, {
      method: "POST",
      headers: admin,
    });
    expect(deny.statusCode).toBe(200);
    await deny.body.dump();
    expect((await held).status).toBe(403);
    // Nobody answers this one within its rule's second.
    expect((await send("/v1/late")).code).toBe("approval_timeout");

    const after = parse((await scrape(f.broker.url)).text);
    expect(after.get(key("keybroker_approvals_pending"))).toBe(0);
    expect(moved(before, after, "keybroker_approvals_answered_total")).toEqual({
      [key("keybroker_approvals_answered_total", { result: "denied" })]: 1,
      [key("keybroker_approvals_answered_total", { result: "approval_timeout" })]: 1,
    });
    expect(moved(before, after, "keybroker_requests_total")).toEqual({
      [key("keybroker_requests_total", {
        client: "default",
        provider: "openai",
        decision: "blocked",
        status: "4xx",
      })]: 2,
    });
  });
});

describe("GET /metrics on a listener other machines reach", () => {
  let broker: BrokerProcess;
  let token: string;
  const home = remoteHome;

  beforeAll(async () => {
    broker = await remoteStarted;
    token = readFileSync(join(remoteHome, "admin.token"), "utf8").trim();
  });
  afterAll(async () => {
    await broker?.stop();
    // The admin token belongs in admin.token, and nowhere else.
    expect(
      findSecrets([AGENT_TOKEN, OPS_TOKEN, token], [home], undefined, (file) => file.endsWith("admin.token")),
    ).toEqual([]);
  });

  it("refuses a caller off loopback without the admin token, and serves it with the token", async () => {
    const loopback = `http://127.0.0.1:${broker.port}`;
    expect((await scrape(loopback)).status).toBe(200);
    // This machine's own non-loopback address: the broker sees a peer that is not 127.0.0.1.
    const address = Object.values(networkInterfaces())
      .flat()
      .find((a) => a !== undefined && a.family === "IPv4" && !a.internal)?.address;
    // A machine with no network interface but loopback can only check the token path (below).
    const remote = address === undefined ? loopback : `http://${address}:${broker.port}`;
    if (address !== undefined) {
      const refused = await scrape(remote);
      expect(refused.status).toBe(403);
      const error = (JSON.parse(refused.text) as { error: { type: string; message: string } }).error;
      expect(error.type).toBe("policy_denied");
      expect(error.message).toContain("needs the admin token");
    }
    // A client whose role is user may not read them; one whose role is admin may, as the owner.
    const user = await scrape(remote, { authorization: `Bearer ${AGENT_TOKEN}` });
    expect(user.status).toBe(403);
    expect(user.text).toContain("client agent has the role user");
    expect((await scrape(remote, { authorization: "Bearer no-such-token" })).status).toBe(403);
    for (const bearer of [token, OPS_TOKEN]) {
      const served = await scrape(remote, { authorization: `Bearer ${bearer}` });
      expect(served.status).toBe(200);
      expect(served.text).toContain("keybroker_requests_total");
    }
  });
});

describe("OAuth refreshes in /metrics", () => {
  it("counts each refresh by result and the login that needs a person again", async () => {
    // Tokens that live a second: the broker refreshes each half a second ahead of expiry.
    fake.accessTtl = 1;
    const t = fake.login();
    await new FileTokenStore(f.home).put(storedLogin("tool-oauth", "default", t));
    const series = async () => parse((await scrape(f.broker.url)).text);
    const refreshes = (s: Scrape, result: string) =>
      s.get(key("keybroker_oauth_refreshes_total", { provider: "tool-oauth", result })) ?? 0;
    const deadline = Date.now() + 15_000;
    let s = await series();
    while (refreshes(s, "ok") < 1) {
      expect(Date.now()).toBeLessThan(deadline);
      await sleep(50);
      s = await series();
    }
    // The user revokes the app: the next refresh is refused for good.
    fake.revokeGrant(t.grant);
    while ((s.get(key("keybroker_reauth_required_total", { provider: "tool-oauth" })) ?? 0) < 1) {
      expect(Date.now()).toBeLessThan(deadline);
      await sleep(50);
      s = await series();
    }
    expect(refreshes(s, "rejected")).toBe(1);
    expect(refreshes(s, "failed")).toBe(0);
    // Every refresh token the authorization server saw, and no other, is counted.
    expect(refreshes(s, "ok") + refreshes(s, "rejected")).toBe(fake.refreshes);
    const state = (name: string) =>
      s.get(
        key("keybroker_credential_state", { provider: "tool-oauth", credential: "default", state: name }),
      );
    expect(state("reauth_required")).toBe(1);
    expect(state("ok")).toBe(0);
    const text = (await scrape(f.broker.url)).text;
    expect(findSecrets(fake.issued, [], [text])).toEqual([]);
  });
});
