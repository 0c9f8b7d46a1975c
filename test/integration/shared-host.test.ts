// Several providers on one host (docs/spec.md §4, decision 123): an API key, a second key and a
// subscription login all on api.anthropic.com. The placeholder a request carries names the
// provider and its pool; no placeholder is forwarded untouched; two providers' placeholders in
// one request are refused before anything leaves.
import { once } from "node:events";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileTokenStore } from "../../state/tokens/home.js";
import {
  type BrokerProcess,
  cliAsync,
  findSecrets,
  startBroker,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import {
  AUTH_HOST,
  type FakeOAuth,
  installFakeOAuth,
  storedLogin,
  upstreamRules,
} from "../helpers/fake-oauth.js";
import { REAL_ANTHROPIC } from "../helpers/fixture.js";
import { brokerError, parseAnswer, tunnelExchange } from "../helpers/raw.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const TEAM_KEY = "sk-ant-team-4c6e8a0b2d4f6a8c0e2b4d6f";
const AGENTS_OWN_KEY = "sk-ant-agents-own-key-not-keybrokers";

let upstream: FakeUpstream;
let fake: FakeOAuth;
let broker: BrokerProcess;
let agent: ProxyAgent;
let vars: Record<string, string>;
let login: ReturnType<FakeOAuth["login"]>;
const dir = tempHome();

function rules(u: FakeUpstream): string {
  return `${upstreamRules(u, ["api.anthropic.com", "api.openai.com", AUTH_HOST])}providers:
  anthropic:
    hosts: [api.anthropic.com]
    inject: { header: [x-api-key, authorization] }
    credentials: [ANTHROPIC_API_KEY]
  anthropic-team:
    hosts: [api.anthropic.com]
    inject: { header: [x-api-key, authorization] }
    credentials: [TEAM_KEY]
    policy:
      - deny: { path: "/v1/admin/**" }
      - approve: { method: PUT, path: "/v1/files/*" }
  claude-sub:
    hosts: [api.anthropic.com]
    oauth: { issuer: "https://${AUTH_HOST}", client_id: app_1, scopes: [openid, offline_access] }
  openai:
    hosts: [api.openai.com]
    credentials: [OPENAI_API_KEY]
approvals: { timeout: 60s }
`;
}

beforeAll(async () => {
  upstream = await startUpstream();
  fake = installFakeOAuth(upstream);
  const home = tempHome();
  login = fake.login();
  await new FileTokenStore(home).put(storedLogin("claude-sub", "default", login));
  const config = writeConfig(dir, rules(upstream));
  broker = await startBroker({
    home,
    config,
    env: { ANTHROPIC_API_KEY: REAL_ANTHROPIC, TEAM_KEY, OPENAI_API_KEY: "sk-openai-unused-5e7a9b1d2f46" },
  });
  agent = new ProxyAgent({ uri: broker.url, requestTls: { ca: readFileSync(broker.caPath, "utf8") } });
  const r = await cliAsync(["env", "--home", home, "--config", config, "--format", "json"]);
  expect(r.status, r.stderr).toBe(0);
  vars = JSON.parse(r.stdout) as Record<string, string>;
});

afterAll(async () => {
  await agent?.close();
  await broker?.stop();
  await upstream?.close();
  const tokenStore = (file: string) => file.includes(`${join("tokens", "")}`);
  expect(
    findSecrets([REAL_ANTHROPIC, TEAM_KEY, ...fake.issued], [broker.home, dir], undefined, tokenStore),
  ).toEqual([]);
});

async function send(headers: Record<string, string>): Promise<{ status: number; text: string }> {
  const res = await request("https://api.anthropic.com/v1/messages", {
    method: "POST",
    dispatcher: agent,
    headers: { "content-type": "application/json", ...headers },
    body: "{}",
  });
  return { status: res.statusCode, text: await res.body.text() };
}

function auditLines(): Record<string, unknown>[] {
  const file = join(broker.home, "audit", "audit.jsonl");
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l.endsWith("}"))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l.host === "api.anthropic.com");
}

describe("several providers on one host", () => {
  it("gives each placeholder its own provider's credential upstream", async () => {
    const key = await send({ "x-api-key": vars.ANTHROPIC_API_KEY! });
    expect(key.status, key.text).toBe(200);
    expect(upstream.received.at(-1)!.headers["x-api-key"]).toBe(REAL_ANTHROPIC);

    const team = await send({ "x-api-key": vars.ANTHROPIC_TEAM_API_KEY! });
    expect(team.status, team.text).toBe(200);
    expect(upstream.received.at(-1)!.headers["x-api-key"]).toBe(TEAM_KEY);

    const sub = await send({ authorization: `Bearer ${vars.CLAUDE_SUB_ACCESS_TOKEN!}` });
    expect(sub.status, sub.text).toBe(200);
    expect(upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${login.access_token}`);
  });

  it("forwards a request without any placeholder untouched, with no credential, and audits it", async () => {
    const before = upstream.received.length;
    const own = await send({ "x-api-key": AGENTS_OWN_KEY });
    expect(own.status, own.text).toBe(200);
    expect(upstream.received.length).toBe(before + 1);
    const got = upstream.received.at(-1)!;
    expect(got.headers["x-api-key"]).toBe(AGENTS_OWN_KEY);
    expect(got.headers.authorization).toBeUndefined();
  });

  it("refuses placeholders of two providers of the host in one request, sending nothing", async () => {
    const before = upstream.received.length;
    const both = await send({
      "x-api-key": vars.ANTHROPIC_API_KEY!,
      authorization: `Bearer ${vars.CLAUDE_SUB_ACCESS_TOKEN!}`,
    });
    expect(both.status).toBe(400);
    const body = JSON.parse(both.text) as { error: { type: string; message: string } };
    expect(body.error.type).toBe("bad_request");
    expect(body.error.message).toContain(
      'placeholders of two providers that share it, "anthropic" and "claude-sub"',
    );
    expect(upstream.received.length).toBe(before);
  });

  it("still blocks a placeholder of a provider of another host", async () => {
    const before = upstream.received.length;
    const leak = await send({ "x-api-key": vars.OPENAI_API_KEY! });
    expect(leak.status).toBe(403);
    expect(leak.text).toContain("placeholder_host_mismatch");
    expect(upstream.received.length).toBe(before);
  });

  it("audits each provider picked, and the request without a placeholder as a passthrough", async () => {
    // The broker writes each line just after its answer: wait for the six of this file.
    const deadline = Date.now() + 10_000;
    let lines = auditLines();
    while (lines.length < 6) {
      expect(Date.now()).toBeLessThan(deadline);
      await new Promise((r) => setTimeout(r, 20));
      lines = auditLines();
    }
    expect(lines.map((l) => [l.decision, l.provider, l.status])).toEqual([
      ["injected", "anthropic", 200],
      ["injected", "anthropic-team", 200],
      ["injected", "claude-sub", 200],
      ["passthrough", undefined, 200],
      ["blocked", "anthropic", 400],
      ["blocked", undefined, 403],
    ]);
  });
});

/** `method target` to api.anthropic.com with the anthropic-team placeholder, bytes as written. */
function team(method: string, target: string): Promise<string> {
  const head =
    `${method} ${target} HTTP/1.1\r\nHost: api.anthropic.com\r\nx-api-key: ${vars.ANTHROPIC_TEAM_API_KEY!}\r\n` +
    `Content-Length: 2\r\nConnection: close\r\n\r\n{}`;
  return tunnelExchange(broker.port, "api.anthropic.com", broker.caPath, head);
}

const HELD = /for approval ([0-9a-f]{8}): to let it through run/g;

/** Resolves with the id of the first request the broker holds from now on (its log line). */
async function nextHeld(seen: number): Promise<string> {
  for (;;) {
    const ids = [...broker.stderr().matchAll(HELD)].map((m) => m[1]!);
    if (ids.length > seen) return ids[seen]!;
    await once(broker.child.stderr!, "data");
  }
}

async function admin(path: string, method: "GET" | "POST" = "GET"): Promise<unknown> {
  const token = readFileSync(join(broker.home, "admin.token"), "utf8").trim();
  const res = await request(`${broker.url}/__keybroker/admin/${path}`, {
    method,
    headers: { authorization: `Bearer ${token}` },
  });
  expect(res.statusCode).toBe(200);
  return res.body.json();
}

// Decisions 101 and 123: the provider of a shared host is known only from the placeholder, and its
// policy must still see (and send upstream) the one canonical path of decision 101.
describe("policy of a provider on a shared host", () => {
  it("denies every spelling of a denied path, sending nothing", async () => {
    for (const target of ["/v1/admin/keys", "/v1//admin/keys", "/v1/%61dmin/keys", "/v1/x/../admin/keys"]) {
      const before = upstream.received.length;
      const err = brokerError(await team("GET", target));
      expect([target, err.status, err.code]).toEqual([target, 403, "policy_denied"]);
      expect(upstream.received.length).toBe(before);
    }
  });

  it("refuses a path with more than one reading, and a placeholder only its canonical form spells", async () => {
    const other = vars.ANTHROPIC_API_KEY!;
    const hidden = `%${other.charCodeAt(0).toString(16)}${other.slice(1)}`;
    const before = upstream.received.length;
    const ambiguous = brokerError(await team("GET", "/v1/admin%2Fkeys"));
    expect([ambiguous.status, ambiguous.code]).toEqual([400, "bad_request"]);
    const two = brokerError(await team("GET", `/v1/files/${hidden}`));
    expect([two.status, two.code]).toEqual([400, "bad_request"]);
    expect(two.message).toContain('"anthropic-team" and "anthropic"');
    expect(upstream.received.length).toBe(before);
  });

  it("forwards the canonical path", async () => {
    const before = upstream.received.length;
    const answer = parseAnswer(await team("GET", "/v1//%6dodels/./x"));
    expect(answer.status, answer.body).toBe(200);
    expect(upstream.received.slice(before).map((r) => [r.url, r.headers["x-api-key"]])).toEqual([
      ["/v1/models/x", TEAM_KEY],
    ]);
  });

  it("holds another spelling of an approve path, lists and forwards it canonical", async () => {
    const before = upstream.received.length;
    const seen = [...broker.stderr().matchAll(HELD)].length;
    const answer = team("PUT", "/v1//%66iles/f1");
    const first = await Promise.race([
      answer.then((text) => ({ answered: text })),
      nextHeld(seen).then((id) => ({ id })),
    ]);
    if ("answered" in first) throw new Error(`not held; answered:\n${first.answered}`);
    expect(upstream.received.length).toBe(before);
    const { approvals } = (await admin("approvals")) as { approvals: { id: string; path: string }[] };
    expect(approvals.find((a) => a.id === first.id)?.path).toBe("/v1/files/f1");
    await admin(`approvals/${first.id}/approve`, "POST");
    expect(parseAnswer(await answer).status).toBe(200);
    expect(upstream.received.slice(before).map((r) => [r.url, r.headers["x-api-key"]])).toEqual([
      ["/v1/files/f1", TEAM_KEY],
    ]);
  });
});
