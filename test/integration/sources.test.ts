// Secret sources end to end: the real broker (dist/) resolves credentials from a fake Infisical
// through the real @infisical/sdk, from .env and from the environment, and a real client's
// requests reach a real HTTPS upstream with the value the chain picked. Rotation, a hanging
// and a failing Infisical, and `keybroker check` are seen from the outside.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type BrokerProcess,
  cliAsync,
  findSecrets,
  startBroker,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { type FakeInfisical, startFakeInfisical } from "../helpers/fake-infisical.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const OPENAI_V1 = "sk-infisical-openai-v1-3c5e7a9b1d2f4608";
const OPENAI_V2 = "sk-infisical-openai-v2-8f6d4b2a0c9e7135";
const GEMINI = "AIza-infisical-gemini-6b4d2f0a8c1e3579";
const ANTHROPIC_ENV = "sk-ant-env-only-1a3c5e7b9d0f2468";
const OPENAI_ENV_DECOY = "sk-env-decoy-openai-0f1e2d3c4b5a6978";
const HOSTS = ["api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com"];

let fake: FakeInfisical;
let upstream: FakeUpstream;
let broker: BrokerProcess;
let agent: ProxyAgent;
let home: string;
let dir: string;
let config: string;
let env: Record<string, string>;
let placeholders: Record<string, string>;

function rules(extra = "", ttl = "1s"): string {
  const resolve = HOSTS.map((h) => `  "${h}:443": "127.0.0.1:${upstream.port}"`).join("\n");
  return `version: 1
upstream_ca: [${JSON.stringify(upstream.caPath)}]
resolve:
${resolve}
sources:
  infisical:
    site_url: ${fake.url}
    project_id: ${fake.projectId}
    environment: ${fake.environment}
    path: /agents
    ttl: ${ttl}
    timeout: 60s
    grace: 3s
providers:
  openai: { credentials: [OPENAI_API_KEY] }
  anthropic: { credentials: [ANTHROPIC_API_KEY] }
  gemini: { credentials: ["infisical:/llm/GEMINI_API_KEY"] }
${extra}`;
}

beforeAll(async () => {
  fake = await startFakeInfisical();
  fake.setSecret("/agents/OPENAI_API_KEY", OPENAI_V1);
  fake.setSecret("/llm/GEMINI_API_KEY", GEMINI);
  upstream = await startUpstream();
  home = tempHome();
  dir = tempHome();
  config = writeConfig(dir, rules());
  env = {
    INFISICAL_CLIENT_ID: fake.clientId,
    INFISICAL_CLIENT_SECRET: fake.clientSecret,
    ANTHROPIC_API_KEY: ANTHROPIC_ENV,
    // Infisical comes first in the chain: this one must never be used while it has a value.
    OPENAI_API_KEY: OPENAI_ENV_DECOY,
  };
  broker = await startBroker({ home, config, env, cwd: dir });
  agent = new ProxyAgent({ uri: broker.url, requestTls: { ca: readFileSync(broker.caPath, "utf8") } });
  const vars = await cliAsync(["env", "--home", home, "--config", config, "--format", "json"], {
    env,
    cwd: dir,
  });
  expect(vars.status).toBe(0);
  placeholders = JSON.parse(vars.stdout) as Record<string, string>;
});

afterAll(async () => {
  fake?.release();
  await agent?.close();
  await broker?.stop();
  await upstream?.close();
  await fake?.close();
  const secrets = [
    OPENAI_V1,
    OPENAI_V2,
    GEMINI,
    ANTHROPIC_ENV,
    OPENAI_ENV_DECOY,
    fake.clientSecret,
    ...fake.tokens,
  ];
  expect(findSecrets(secrets, [home, dir])).toEqual([]);
});

async function openai(): Promise<{ status: number; sent: string | undefined }> {
  const before = upstream.received.length;
  const res = await request("https://api.openai.com/v1/chat/completions", {
    method: "POST",
    dispatcher: agent,
    headers: { "content-type": "application/json", authorization: `Bearer ${placeholders.OPENAI_API_KEY}` },
    body: '{"model":"gpt-test"}',
  });
  await res.body.text();
  const got = upstream.received.length > before ? upstream.received.at(-1) : undefined;
  return { status: res.statusCode, sent: got?.headers.authorization?.toString().replace(/^Bearer /, "") };
}

async function anthropic(): Promise<{ status: number; sent: string | undefined }> {
  const before = upstream.received.length;
  const res = await request("https://api.anthropic.com/v1/messages", {
    method: "POST",
    dispatcher: agent,
    headers: {
      "content-type": "application/json",
      "x-api-key": placeholders.ANTHROPIC_API_KEY!,
      "anthropic-version": "2023-06-01",
    },
    body: '{"model":"claude-test"}',
  });
  await res.body.text();
  const got = upstream.received.length > before ? upstream.received.at(-1) : undefined;
  return { status: res.statusCode, sent: got?.headers["x-api-key"]?.toString() };
}

async function gemini(): Promise<{ status: number; error: string | undefined; sent: string | null }> {
  const before = upstream.received.length;
  const res = await request(
    `https://generativelanguage.googleapis.com/v1beta/models?key=${placeholders.GEMINI_API_KEY}`,
    {
      dispatcher: agent,
    },
  );
  await res.body.text();
  const got = upstream.received.length > before ? upstream.received.at(-1) : undefined;
  return {
    status: res.statusCode,
    error: res.headers["x-keybroker-error"]?.toString(),
    sent: got === undefined ? null : new URL(got.url, "https://x").searchParams.get("key"),
  };
}

/** Calls `step` until `done` says so (bounded: 150 tries, 100 ms apart). */
async function until<T>(step: () => Promise<T>, done: (result: T) => boolean): Promise<T[]> {
  const seen: T[] = [];
  for (let i = 0; i < 150; i++) {
    const result = await step();
    seen.push(result);
    if (done(result)) return seen;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`condition not reached; last results: ${JSON.stringify(seen.slice(-3))}`);
}

describe("secrets from Infisical, .env and the environment, end to end", () => {
  it("sends the value Infisical holds, not the environment's", async () => {
    expect(placeholders.OPENAI_API_KEY).not.toBe(OPENAI_ENV_DECOY);
    expect(await openai()).toEqual({ status: 200, sent: OPENAI_V1 });
    const login = fake.requests.find((r) => r.path === "/api/v1/auth/universal-auth/login");
    expect(JSON.parse(login!.body)).toEqual({ clientId: fake.clientId, clientSecret: fake.clientSecret });
  });

  it("regression: falls back to the environment when Infisical, first in the chain, has nothing", async () => {
    expect(await anthropic()).toEqual({ status: 200, sent: ANTHROPIC_ENV });
  });

  it("reads infisical:/path/NAME references", async () => {
    expect(await gemini()).toEqual({ status: 200, error: undefined, sent: GEMINI });
  });

  it("uses a value rotated in Infisical within the TTL, without a restart", async () => {
    fake.setSecret("/agents/OPENAI_API_KEY", OPENAI_V2);
    const seen = await until(openai, (r) => r.sent === OPENAI_V2);
    // Every request on the way went out with one of the two real values, never anything else.
    for (const r of seen) {
      expect(r.status).toBe(200);
      expect([OPENAI_V1, OPENAI_V2]).toContain(r.sent);
    }
    expect(await openai()).toEqual({ status: 200, sent: OPENAI_V2 });
  });

  it("check says which source answered each credential and why the others did not", async () => {
    // A TTL longer than check's own run: with 1 s a loaded machine saw the answer go stale
    // between the lookup and the report ("stale: no answer yet").
    const slowTtl = writeConfig(dir, rules("", "60s"), "check-ttl.yaml");
    const r = await cliAsync(["check", "--home", home, "--config", slowTtl], { env, cwd: dir });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain(
      `lookup chain for bare names: infisical (${fake.url}, project ${fake.projectId}, environment dev, folder /agents) → dotenv`,
    );
    expect(r.stdout).toMatch(/openai: active\n {2}OPENAI_API_KEY: from infisical \(sha256:[0-9a-f]{12}\)\n/);
    expect(r.stdout).toMatch(
      /ANTHROPIC_API_KEY: from env \(sha256:[0-9a-f]{12}\); before it infisical: missing, dotenv: missing/,
    );
    expect(r.stdout).toMatch(/infisical:\/llm\/GEMINI_API_KEY: from infisical \(sha256:[0-9a-f]{12}\)/);
  });

  it("check explains an -oauth provider and exits 1 for a provider without a credential", async () => {
    const other = writeConfig(
      tempHome(),
      rules(`  mine:
    hosts: [api.mine.example]
    credentials: [MINE_API_KEY, "infisical:/llm/MINE_KEY", "cmd:false"]
  codex-oauth:
    hosts: [chatgpt.com]
    oauth: { device_authorization_endpoint: "https://auth.example.com/device", token_endpoint: "https://auth.example.com/token", client_id: app_1 }
`),
    );
    writeFileSync(join(dir, ".env"), "MINE_API_KEY=\n");
    const r = await cliAsync(["check", "--home", home, "--config", other], {
      env: { ...env, CODEX_OAUTH_API_KEY: OPENAI_ENV_DECOY },
      cwd: dir,
    });
    expect(r.status).toBe(1);
    expect(r.stdout).toContain(
      "codex-oauth: inactive — it authenticates only with OAuth logins and has none yet (keybroker auth add codex-oauth); it never reads CODEX_OAUTH_API_KEY or any other API key",
    );
    expect(r.stdout).toContain("mine: NO CREDENTIAL");
    expect(r.stdout).toContain("MINE_API_KEY: not found (infisical: missing, dotenv: empty, env: missing)");
    expect(r.stdout).toContain("infisical:/llm/MINE_KEY: not found (infisical: missing)");
    expect(r.stdout).toContain(
      "cmd:false: not found (cmd: error (the command (cmd:false) exited with status 1",
    );
    expect(r.stderr).toContain(
      'problem: provider "mine" has no credential: set MINE_API_KEY in Infisical (folder /agents), .env or the environment',
    );
    expect(r.stderr).not.toContain("codex-oauth");
  });

  it("a hanging Infisical holds up only the credentials it holds", async () => {
    fake.mode = "hanging";
    const held = fake.requests.length;
    // Anthropic's key lives in the environment; once its cached Infisical answer is past the
    // TTL, a refresh of the folder starts and hangs (the lookup timeout is 60 s here).
    await until(anthropic, () => fake.requests.slice(held).some((r) => r.path === "/api/v3/secrets/raw"));
    // Past the TTL with that refresh still hanging: every request still goes out at once
    // (waiting for the refresh would run past this test's time limit).
    for (let i = 0; i < 15; i++) {
      expect(await anthropic()).toEqual({ status: 200, sent: ANTHROPIC_ENV });
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(fake.requests.slice(held).filter((r) => r.path === "/api/v3/secrets/raw")).toHaveLength(1);
    fake.release();
    await until(openai, (r) => r.sent === OPENAI_V2);
  });

  it("while Infisical fails: the last value with a warning, then 503 credential_unavailable, then back", async () => {
    fake.mode = "failing";
    const seen = await until(gemini, (r) => r.status === 503);
    for (const r of seen.slice(0, -1)) expect(r).toEqual({ status: 200, error: undefined, sent: GEMINI });
    expect(seen.at(-1)).toEqual({ status: 503, error: "credential_unavailable", sent: null });
    expect(broker.stderr()).toContain("Infisical is failing (Infisical answered HTTP 503");
    expect(broker.stderr()).toContain("is past its grace period and no longer used");

    fake.mode = "up";
    await until(gemini, (r) => r.status === 200);
    expect(await gemini()).toEqual({ status: 200, error: undefined, sent: GEMINI });
  });
});
