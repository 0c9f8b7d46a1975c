// The `infisical` source driven through the real @infisical/sdk against a fake Infisical on
// 127.0.0.1: login, renewal, 401, rotation, outages, a hanging server, and the lookup chain.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { parseRules } from "../../../rules/load.js";
import type { InfisicalSdkModule, SdkLoader } from "../../../secrets/infisical-sdk.js";
import type { Resolution, SecretResolver } from "../../../secrets/resolver.js";
import { createSecretResolver } from "../../../secrets/sources.js";
import { findSecrets } from "../../helpers/broker.js";
import { type FakeInfisical, startFakeInfisical } from "../../helpers/fake-infisical.js";

const V1 = "sk-infisical-held-v1-4b8d2f6a0c9e1357";
const V2 = "sk-infisical-held-v2-9e7c5a3f1d2b4680";
const LLM = "sk-ant-infisical-llm-5d1f3b7e9a2c4680";
const ENV_ONLY = "sk-env-only-value-0a1b2c3d4e5f6789";

let fake: FakeInfisical;
let clock: number;
let warnings: string[];
let texts: string[];

beforeEach(async () => {
  fake = await startFakeInfisical();
  fake.setSecret("/agents/OPENAI_API_KEY", V1);
  fake.setSecret("/llm/ANTHROPIC_API_KEY", LLM);
  clock = Date.now();
  warnings = [];
  texts = [];
});

afterEach(async () => {
  await fake.close();
  // Nothing the source said (warnings, attempts, errors) may hold a secret or a token.
  const secrets = [V1, V2, LLM, ENV_ONLY, fake.clientSecret, ...fake.tokens];
  expect(findSecrets(secrets, [], [...warnings, ...texts])).toEqual([]);
});

interface Setup {
  readonly env?: Record<string, string>;
  readonly infisical?: string;
  readonly order?: string;
  readonly loadSdk?: SdkLoader;
}

function resolverFor(setup: Setup = {}): SecretResolver {
  const yaml = `version: 1
sources:
${setup.order === undefined ? "" : `  order: ${setup.order}\n`}  infisical:
    site_url: ${fake.url}
    project_id: ${fake.projectId}
    environment: ${fake.environment}
    path: /agents
    ttl: 60s
    grace: 5m
${setup.infisical ?? ""}`;
  const rules = parseRules(yaml, "test.yaml", "/");
  const home = mkdtempSync(join(tmpdir(), "kb-infisical-"));
  return createSecretResolver(rules, {
    env: {
      INFISICAL_CLIENT_ID: fake.clientId,
      INFISICAL_CLIENT_SECRET: fake.clientSecret,
      ...setup.env,
    },
    home,
    cwd: home,
    warn: (m) => warnings.push(m),
    now: () => clock,
    ...(setup.loadSdk === undefined ? {} : { loadInfisicalSdk: setup.loadSdk }),
  });
}

async function resolve(r: SecretResolver, ref: string): Promise<Resolution> {
  const resolution = await r.resolve(ref);
  texts.push(JSON.stringify(resolution), JSON.stringify(resolution.attempts));
  return resolution;
}

function outcomes(r: Resolution): string[] {
  return r.attempts.map((a) => `${a.source}:${a.outcome}${a.stale === true ? ":stale" : ""}`);
}

function count(path: string | RegExp): number {
  return fake.requests.filter((r) => (typeof path === "string" ? r.path === path : path.test(r.path))).length;
}

const LOGIN = "/api/v1/auth/universal-auth/login";
const RENEW = "/api/v1/auth/token/renew";
const LIST = "/api/v3/secrets/raw";

describe("infisical source through the real SDK", () => {
  it("logs in with universal auth and reads a bare name from the configured folder", async () => {
    const r = resolverFor();
    const res = await resolve(r, "OPENAI_API_KEY");
    expect(res.secret?.reveal()).toBe(V1);
    expect(res.secret?.source).toBe("infisical");
    expect(outcomes(res)).toEqual(["infisical:found"]);
    const list = fake.requests.find((q) => q.path === LIST)!;
    expect(list.query).toMatchObject({
      workspaceId: fake.projectId,
      environment: "dev",
      secretPath: "/agents",
      include_imports: "true",
    });
    expect(list.authorization).toMatch(/^Bearer /);
    expect(count(LOGIN)).toBe(1);
  });

  it("reads infisical:/path/NAME as one secret, imports included", async () => {
    fake.setSecret("/shared/SHARED_KEY", V2);
    fake.addImport("/llm", "/shared");
    const r = resolverFor();
    expect((await resolve(r, "infisical:/llm/ANTHROPIC_API_KEY")).secret?.reveal()).toBe(LLM);
    const get = fake.requests.find((q) => q.path === `${LIST}/ANTHROPIC_API_KEY`)!;
    expect(get.query).toMatchObject({ secretPath: "/llm", includeImports: "true" });
    expect((await resolve(r, "infisical:/llm/SHARED_KEY")).secret?.reveal()).toBe(V2);
  });

  it("lists the folder once for every bare name (one fetch in flight, then the cache)", async () => {
    const r = resolverFor({ env: { A: "a-value-1234", B: "b-value-1234" } });
    await Promise.all(["OPENAI_API_KEY", "A", "B", "C"].map((ref) => resolve(r, ref)));
    await resolve(r, "A");
    expect(count(LIST)).toBe(1);
    expect(count(LOGIN)).toBe(1);
  });

  it("passes a missing or empty secret to the next source", async () => {
    fake.setSecret("/agents/EMPTY_IN_INFISICAL", "");
    const r = resolverFor({ env: { ENV_ONLY_KEY: ENV_ONLY, EMPTY_IN_INFISICAL: ENV_ONLY } });
    const missing = await resolve(r, "ENV_ONLY_KEY");
    expect(missing.secret?.reveal()).toBe(ENV_ONLY);
    expect(outcomes(missing)).toEqual(["infisical:missing", "dotenv:missing", "env:found"]);
    const empty = await resolve(r, "EMPTY_IN_INFISICAL");
    expect(outcomes(empty)).toEqual(["infisical:empty", "dotenv:missing", "env:found"]);
    const explicit = await resolve(r, "infisical:/llm/NOT_THERE");
    expect(explicit.secret).toBeUndefined();
    expect(outcomes(explicit)).toEqual(["infisical:missing"]);
  });

  it("regression: a chain whose first source returns nothing falls back to the environment", async () => {
    // From the field: Infisical had no value and the lookup stopped there, although the
    // secret manager had injected it into the environment.
    const r = resolverFor({ env: { GROQ_API_KEY: ENV_ONLY } });
    const res = await resolve(r, "GROQ_API_KEY");
    expect(res.secret?.reveal()).toBe(ENV_ONLY);
    expect(res.secret?.source).toBe("env");
    expect(r.order).toEqual(["infisical", "dotenv", "env"]);
  });

  it("picks up a rotated value once the TTL has passed; a secret already handed out keeps its value", async () => {
    const r = resolverFor();
    const first = (await resolve(r, "OPENAI_API_KEY")).secret!;
    fake.setSecret("/agents/OPENAI_API_KEY", V2);
    clock += 30_000;
    expect(r.peek("OPENAI_API_KEY")?.reveal()).toBe(V1);
    clock += 31_000;
    expect(r.peek("OPENAI_API_KEY")).toBeUndefined();
    const second = await resolve(r, "OPENAI_API_KEY");
    expect(second.secret?.reveal()).toBe(V2);
    expect(first.reveal()).toBe(V1);
    expect(count(LIST)).toBe(2);
  });

  it("refreshes in the background before the TTL runs out", async () => {
    const r = resolverFor({ infisical: "    timeout: 60s\n" });
    await resolve(r, "OPENAI_API_KEY");
    fake.setSecret("/agents/OPENAI_API_KEY", V2);
    clock += 50_000; // past 3/4 of the 60 s TTL: served from memory, refreshed behind
    const seen = fake.requests.length;
    expect((await resolve(r, "OPENAI_API_KEY")).secret?.reveal()).toBe(V1);
    await fake.nextRequest((q) => q.path === LIST, seen);
    clock += 11_000;
    await expect.poll(async () => (await r.resolve("OPENAI_API_KEY")).secret?.reveal()).toBe(V2);
  });

  it("logs in again after a 401 and retries", async () => {
    const r = resolverFor();
    await resolve(r, "OPENAI_API_KEY");
    fake.revokeTokens();
    fake.setSecret("/agents/OPENAI_API_KEY", V2);
    clock += 61_000;
    const res = await resolve(r, "OPENAI_API_KEY");
    expect(res.secret?.reveal()).toBe(V2);
    expect(count(LOGIN)).toBe(2);
    const lists = fake.requests.filter((q) => q.path === LIST);
    expect(lists).toHaveLength(3); // ok, 401, retried with the new token
    expect(lists[2]!.authorization).not.toBe(lists[1]!.authorization);
  });

  it("renews the access token before it expires", async () => {
    fake.tokenTtlSeconds = 100;
    const r = resolverFor();
    await resolve(r, "OPENAI_API_KEY");
    clock += 80_000; // past 3/4 of the token's life
    await resolve(r, "infisical:/llm/ANTHROPIC_API_KEY");
    expect(count(RENEW)).toBe(1);
    expect(count(LOGIN)).toBe(1);
    const renew = fake.requests.find((q) => q.path === RENEW)!;
    expect(JSON.parse(renew.body)).toEqual({ accessToken: fake.tokens[0] });
    const get = fake.requests.find((q) => q.path === `${LIST}/ANTHROPIC_API_KEY`)!;
    expect(get.authorization).toBe(`Bearer ${fake.tokens[1]}`);
  });

  it("serves the last value with a warning while Infisical fails, then fails closed", async () => {
    const r = resolverFor();
    expect((await resolve(r, "OPENAI_API_KEY")).secret?.reveal()).toBe(V1);
    fake.mode = "failing";
    clock += 61_000;
    const stale = await resolve(r, "OPENAI_API_KEY");
    expect(stale.secret?.reveal()).toBe(V1);
    expect(outcomes(stale)).toEqual(["infisical:found:stale"]);
    expect(stale.attempts[0]!.message).toContain("HTTP 503");
    expect(warnings.filter((w) => w.includes("serving the last value of folder /agents"))).toHaveLength(1);
    clock += 10_000;
    expect((await resolve(r, "OPENAI_API_KEY")).secret?.reveal()).toBe(V1);
    expect(warnings.filter((w) => w.includes("serving the last value"))).toHaveLength(1);

    clock += 5 * 60_000; // failing for longer than the 5 min grace
    const closed = await resolve(r, "OPENAI_API_KEY");
    expect(closed.secret).toBeUndefined();
    expect(outcomes(closed)).toEqual(["infisical:error", "dotenv:missing", "env:missing"]);
    expect(closed.attempts[0]!.message).toContain("no longer used");
    expect(warnings.some((w) => w.includes("past its grace period"))).toBe(true);

    fake.mode = "up";
    await expect
      .poll(async () => {
        clock += 5_000; // the next retry
        return (await r.resolve("OPENAI_API_KEY")).secret?.reveal();
      })
      .toBe(V1);
    expect(warnings.some((w) => w.includes("Infisical answers again"))).toBe(true);
  });

  it("never waits out the SDK's retries against a server that is gone", async () => {
    // The SDK retries a refused connection for ~15 s; the lookup waits `timeout` at most. A
    // stall would run past this test's time limit.
    const r = resolverFor({ infisical: "    timeout: 300ms\n" });
    await resolve(r, "OPENAI_API_KEY");
    await fake.close();
    clock += 61_000;
    const stale = await resolve(r, "OPENAI_API_KEY");
    expect(stale.secret?.reveal()).toBe(V1);
    expect(stale.attempts[0]!.message).toMatch(/no answer within 300 ms|cannot reach Infisical/);
    // A cold reference fails within the timeout too, and the chain goes on.
    const cold = await resolve(r, "infisical:/llm/ANTHROPIC_API_KEY");
    expect(cold.secret).toBeUndefined();
    expect(cold.attempts[0]!.outcome).toBe("error");
  });

  it("says at once that Infisical cannot be reached, instead of waiting out the SDK's retries", async () => {
    await fake.close();
    const r = resolverFor({ env: { OPENAI_API_KEY: ENV_ONLY } });
    const res = await resolve(r, "OPENAI_API_KEY");
    expect(res.secret?.source).toBe("env");
    expect(res.attempts[0]!.message).toBe(
      `cannot reach Infisical at ${fake.url} while listing folder /agents (ECONNREFUSED) — check sources.infisical.site_url and the network`,
    );
  });

  it("a hanging server holds up only the credentials that need it", async () => {
    const r = resolverFor({ env: { GROQ_API_KEY: ENV_ONLY }, infisical: "    timeout: 60s\n" });
    expect((await resolve(r, "GROQ_API_KEY")).secret?.source).toBe("env");
    fake.mode = "hanging";
    clock += 61_000;
    let settled = false;
    const slow = resolve(r, "infisical:/llm/ANTHROPIC_API_KEY").finally(() => {
      settled = true;
    });
    await fake.nextRequest((q) => q.path === `${LIST}/ANTHROPIC_API_KEY`, 0);
    // GROQ_API_KEY's chain starts with Infisical too, but Infisical never held it: it is not
    // worth waiting for, and the environment answers.
    const other = await resolve(r, "GROQ_API_KEY");
    expect(other.secret?.reveal()).toBe(ENV_ONLY);
    expect(settled).toBe(false);
    fake.release();
    expect((await slow).secret?.reveal()).toBe(LLM);
  });

  it("explains a refused login without showing the client secret, and the chain goes on", async () => {
    const r = resolverFor({
      env: { INFISICAL_CLIENT_SECRET: "wrong-secret-value-123", OPENAI_API_KEY: ENV_ONLY },
    });
    const res = await resolve(r, "OPENAI_API_KEY");
    expect(res.secret?.reveal()).toBe(ENV_ONLY);
    expect(res.attempts[0]!.outcome).toBe("error");
    expect(res.attempts[0]!.message).toContain("Infisical refused the login (HTTP 401: Invalid credentials)");
    expect(res.attempts[0]!.message).toContain("sources.infisical.auth");
    expect(JSON.stringify(res)).not.toContain("wrong-secret-value-123");
  });

  it("says which login credential is missing", async () => {
    const r = resolverFor({ env: { INFISICAL_CLIENT_SECRET: "" } });
    const res = await resolve(r, "infisical:/llm/ANTHROPIC_API_KEY");
    expect(res.secret).toBeUndefined();
    expect(res.attempts[0]!.message).toContain(
      "Infisical's client_secret (sources.infisical.auth.client_secret: env:INFISICAL_CLIENT_SECRET) has no value (env: empty)",
    );
    expect(count(LOGIN)).toBe(0);
  });

  it("names the install command when the optional @infisical/sdk is not installed", async () => {
    // What an install made with --omit=optional meets: the import itself fails.
    const missing = "@infisical/sdk-not-installed";
    const r = resolverFor({
      env: { OPENAI_API_KEY: ENV_ONLY },
      loadSdk: () => import(missing) as Promise<InfisicalSdkModule>,
    });
    const res = await resolve(r, "OPENAI_API_KEY");
    expect(res.secret?.reveal()).toBe(ENV_ONLY); // the chain goes on
    expect(res.attempts[0]!.outcome).toBe("error");
    expect(res.attempts[0]!.message).toContain(
      "needs the optional package @infisical/sdk, which is not installed",
    );
    expect(res.attempts[0]!.message).toMatch(/run `npm install @infisical\/sdk` in \/\S+/);
    expect(count(LOGIN)).toBe(0);
  });

  it("reads Infisical's own login from .env or a file", async () => {
    const dir = mkdtempSync(join(tmpdir(), "kb-infisical-auth-"));
    writeFileSync(join(dir, ".env"), `export INFISICAL_ID="${fake.clientId}"\n`);
    writeFileSync(join(dir, "secret"), `${fake.clientSecret}\n`, { mode: 0o600 });
    const rules = parseRules(
      `version: 1
sources:
  dotenv: ./.env
  infisical:
    site_url: ${fake.url}
    project_id: ${fake.projectId}
    environment: dev
    path: /agents
    auth: { client_id: "dotenv:INFISICAL_ID", client_secret: "file:./secret" }
`,
      join(dir, "keybroker.yaml"),
      dir,
    );
    const r = createSecretResolver(rules, { env: {}, home: dir, warn: (m) => warnings.push(m) });
    expect((await resolve(r, "OPENAI_API_KEY")).secret?.reveal()).toBe(V1);
    expect(warnings).toEqual([]);
  });
});
