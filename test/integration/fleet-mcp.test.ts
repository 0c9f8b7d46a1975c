// MCP logins in a fleet (docs/spec.md §15, §17): the binding of a login (authorization server, client,
// resource) and the client registration (with its secret) live in the fleet's Redis, next to
// the login, so any broker refreshes an MCP login another machine made. Two homes with the same
// CA and home key, one real redis-server, the SDK's MCP server and authorization server (which
// registers keybroker as a confidential client and rotates refresh tokens), and the SDK's
// client as the agent: a login made through home 1 is refreshed by broker 2 after it expired;
// Redis down, the expired login is 503 and nobody refreshes; Redis back empty, broker 2 puts
// back the login with its binding and refreshes it; `auth remove` through home 2 removes it for
// the fleet. No token or client secret is in clear in Redis or in any home, and a binding
// rewritten or moved in Redis is not used.
import { randomBytes } from "node:crypto";
import { cpSync, existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminTokenPath } from "../../admin/api.js";
import type { StatusReport } from "../../admin/status.js";
import { loadOrCreateCa } from "../../certs/ca.js";
import { homeKey } from "../../core/home.js";
import type { McpBinding } from "../../state/mcp/store.js";
import { RedisState } from "../../state/redis/state.js";
import {
  type BrokerProcess,
  cliAsync,
  findSecrets,
  outputs,
  startBroker,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { freePort } from "../helpers/cli-session.js";
import { type FakeMcp, MCP_URL, mcpRules, startFakeMcp } from "../helpers/fake-mcp.js";
import { agentClient, mcpAuthAdd, refusedConnect } from "../helpers/mcp-agent.js";
import { type RedisServer, redisLeaks, startRedis } from "../helpers/redis.js";

const PREFIX = "kbmcp:";
const BINDINGS = `${PREFIX}mcp:bindings`;
const REGISTRATIONS = `${PREFIX}mcp:registrations`;
const LOGIN = JSON.stringify(["notes", "default"]);

let redis: RedisServer;
let raw: Redis;
let fake: FakeMcp;
let config: string;
let dir: string;
const homes: string[] = [];
/** Broker 1 (home 1) starts only at the end: until then broker 2 is the fleet's only broker. */
const brokers: (BrokerProcess | undefined)[] = [undefined, undefined];

async function until<T>(check: () => Promise<T | undefined | false>, what: string, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check().catch(() => undefined);
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** What a broker's admin API says (`keybroker status --json` reads the same). */
async function status(i: number): Promise<StatusReport> {
  const token = readFileSync(adminTokenPath(homes[i]!), "utf8").trim();
  const res = await request(`${brokers[i]!.url}/__keybroker/admin/status`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return (await res.body.json()) as StatusReport;
}
const held = async (i: number) =>
  (await status(i)).providers.find((p) => p.id === "notes")?.credentials.find((c) => c.id === "default");

const mount = (i: number) => `${brokers[i]!.url}/p/notes/mcp`;

/** The agent calls a tool through broker `i`. */
async function echo(i: number, text: string): Promise<void> {
  const { client } = await agentClient(mount(i));
  expect(await client.callTool({ name: "echo", arguments: { text } })).toMatchObject({
    content: [{ type: "text", text: `echo: ${text}` }],
  });
  await client.close();
}

/** The refresh requests the authorization server got (form bodies), from `from` on. */
const refreshes = (from = 0) =>
  fake.asSeen
    .slice(from)
    .filter((s) => s.path === "/token" && (s.body as Record<string, string>).grant_type === "refresh_token")
    .map((s) => s.body as Record<string, string>);

const audited = (i: number, decision: string) =>
  readFileSync(join(homes[i]!, "audit", "audit.jsonl"), "utf8")
    .split("\n")
    .filter((l) => l.includes(`"decision":"${decision}"`) && l.includes('"provider":"notes"'));

beforeAll(async () => {
  [redis, fake] = await Promise.all([startRedis(), startFakeMcp()]);
  raw = redis.client();
  // keybroker gets a client secret when it registers: the fleet must keep it sealed.
  fake.confidential = true;
  dir = tempHome();
  config = writeConfig(dir, mcpRules(fake, `state: { url: "${redis.url}", prefix: "${PREFIX}" }\n`));
  // Home 1 made as `keybroker init` makes it; home 2 gets a copy of its CA and home key.
  homes.push(tempHome(), tempHome());
  loadOrCreateCa(homes[0]!);
  homeKey(homes[0]!);
  cpSync(join(homes[0]!, "ca"), join(homes[1]!, "ca"), { recursive: true });
  cpSync(join(homes[0]!, "home.key"), join(homes[1]!, "home.key"));
  brokers[1] = await startBroker({ home: homes[1]!, config });
}, 60_000);

afterAll(async () => {
  for (const b of brokers) await b?.stop();
  raw?.disconnect();
  await redis?.stop();
  await fake?.close();
  expect(fake.issued.length).toBeGreaterThan(0);
  // In a fleet no home holds a token or the client secret: they live sealed in Redis.
  expect(findSecrets(fake.issued, [...homes, dir], outputs)).toEqual([]);
});

describe("MCP logins shared by a fleet", () => {
  it("a login made through home 1 is refreshed by broker 2 once it expired, with the binding and client from Redis", async () => {
    fake.accessTtl = 2;
    const r = await mcpAuthAdd(fake, { home: homes[0]!, config, port: await freePort() });
    expect(r.code, r.err).toBe(0);
    expect(r.out).toContain("Registered keybroker as a client");
    const expired = Date.now() + 2_000;
    // Tokens from the next refresh on live long: one refresh is all this expiry takes.
    fake.accessTtl = 3600;
    const [, loginAt, loginRt] = fake.issued;
    // The binding and the registration went to Redis, not to home 1.
    expect(await raw.hkeys(BINDINGS)).toEqual([LOGIN]);
    expect(await raw.hlen(REGISTRATIONS)).toBe(1);
    expect(existsSync(join(homes[0]!, "tokens"))).toBe(false);

    await new Promise((r) => setTimeout(r, Math.max(0, expired - Date.now())));
    const mcpFrom = fake.mcpSeen.length;
    await echo(1, "after expiry");
    // Broker 2 refreshed the login it never saw made: at the login's server, as its client
    // (with the registration's secret), for its resource, with its one refresh token.
    // (It refreshes ahead of expiry: a token it got before the server's lifetime went up to an
    // hour was short too, and refreshed in turn.) Each refresh sent the token the one before got.
    const sent = refreshes();
    const rts = fake.issued.filter((t) => t.startsWith("mcp-rt-"));
    expect(sent.length).toBeGreaterThan(0);
    expect(sent.map((b) => b.refresh_token)).toEqual(rts.slice(0, sent.length));
    expect(rts).toHaveLength(sent.length + 1);
    expect(sent[0]!.refresh_token).toBe(loginRt);
    const authorize = fake.asSeen.find((s) => s.path.startsWith("/authorize"))!;
    const clientId = new URL(authorize.path, MCP_URL).searchParams.get("client_id");
    for (const body of sent) {
      expect(body).toMatchObject({ client_id: clientId, resource: MCP_URL });
      expect(body.client_secret).toMatch(/^mcp-cs-/);
      expect(fake.issued).toContain(body.client_secret);
    }
    expect(fake.reuses).toBe(0);
    expect(audited(1, "refreshed")).toHaveLength(sent.length);
    // The MCP server saw only the refreshed token, never the expired one.
    const used = new Set(fake.mcpSeen.slice(mcpFrom).map((s) => String(s.headers.authorization).slice(7)));
    expect(used.has(loginAt!)).toBe(false);
    expect([...used].every((t) => fake.issued.includes(t))).toBe(true);
    expect(await redisLeaks(raw, fake.issued)).toEqual([]);
  }, 30_000);

  it("Redis down: the expired login is 503 credential_unavailable and nobody refreshes; back empty, broker 2 puts back the binding and refreshes", async () => {
    // Short tokens again: the server forgets the held one, broker 2 refreshes after the 401.
    fake.accessTtl = 2;
    fake.dropAccessTokens();
    await echo(1, "short token");
    await redis.stop();
    await until(async () => (await status(1)).state?.degradedSince, "broker 2 to say degraded");
    const during = refreshes().length;
    // Whatever it refreshed before the outage lives 2 s: wait until broker 2's token expired.
    await until(async () => {
      const c = await held(1);
      return c?.expiresAt !== undefined && Date.parse(c.expiresAt) <= Date.now();
    }, "the access token to expire");
    const answers = await refusedConnect(mount(1));
    expect(answers.map((a) => [a.status, a.headers.get("x-keybroker-error")])).toEqual([
      [503, "credential_unavailable"],
    ]);
    expect(refreshes().length).toBe(during);

    fake.accessTtl = 3600;
    await redis.restart();
    await until(async () => (await status(1)).state?.degradedSince === undefined, "broker 2 to recover");
    // The empty Redis got back the login, its binding and the registration its client needs.
    expect(await raw.hkeys(BINDINGS)).toEqual([LOGIN]);
    expect(await raw.hlen(REGISTRATIONS)).toBe(1);
    const before = refreshes().length;
    await echo(1, "after the outage");
    expect(refreshes().length).toBeGreaterThan(before);
    expect(fake.reuses).toBe(0);
    expect(await redisLeaks(raw, fake.issued)).toEqual([]);
  }, 30_000);

  it("broker 1 serves the same login; auth remove through home 2 revokes it and removes it for the fleet", async () => {
    brokers[0] = await startBroker({ home: homes[0]!, config });
    const before = refreshes().length;
    await until(async () => (await held(0))?.state === "ok", "broker 1 to hold the login");
    await echo(0, "broker 1");
    expect(refreshes().length).toBe(before);

    const r = await cliAsync([
      "auth",
      "remove",
      "notes",
      "--credential",
      "default",
      "--home",
      homes[1]!,
      "--config",
      config,
    ]);
    outputs.push(r.stdout, r.stderr);
    // Revoked as the client it was made with (the registration's secret, from Redis).
    expect(r.stdout).toContain('notes: removed login "default" and revoked it at the authorization server');
    const revoked = fake.asSeen
      .filter((s) => s.path === "/revoke")
      .map((s) => s.body as Record<string, string>);
    expect(revoked).toHaveLength(1);
    expect(fake.issued).toContain(revoked[0]!.client_secret);
    expect(await raw.hkeys(BINDINGS)).toEqual([]);
    expect(await raw.hkeys(`${PREFIX}logins`)).toEqual([]);
    for (const i of [0, 1]) {
      await until(
        async () => {
          const answers = await refusedConnect(mount(i));
          return (
            answers[0]?.status === 401 && answers[0].headers.get("x-keybroker-error") === "reauth_required"
          );
        },
        `broker ${i + 1} to answer reauth_required`,
      );
    }
    // Neither home holds any of it.
    for (const home of homes) expect(existsSync(join(home, "tokens"))).toBe(false);
    expect(await redisLeaks(raw, fake.issued)).toEqual([]);
  }, 30_000);

  it("a binding or registration rewritten in Redis, or moved to another login, is not used", async () => {
    const open = (key: Buffer) =>
      RedisState.open(
        { url: redis.url, prefix: "kbseal:" },
        { home: dir, homeKey: () => key, resolve: async () => undefined, log: { warn() {}, info() {} } },
      );
    const state = await open(homeKey(homes[0]!));
    const stranger = await open(randomBytes(32));
    try {
      const binding: McpBinding = {
        provider: "notes",
        id: "a",
        resource: MCP_URL,
        server: {
          issuer: "https://as.test",
          authorization_endpoint: "https://as.test/a",
          token_endpoint: "https://as.test/t",
        },
        clientId: "c1",
        authMethod: "client_secret_post",
        clientSource: "registered",
      };
      await state.mcp.putBinding(binding);
      await state.mcp.putRegistration({
        issuer: "https://as.test",
        clientId: "c1",
        clientSecret: "cs-in-redis-0f1e2d3c",
        authMethod: "client_secret_post",
        redirectUris: ["http://127.0.0.1:8765/callback"],
        registeredAt: Date.now(),
      });
      expect(await state.mcp.binding("notes", "a")).toEqual(binding);
      expect((await state.mcp.registration("https://as.test"))?.clientSecret).toBe("cs-in-redis-0f1e2d3c");
      expect(await redisLeaks(raw, ["cs-in-redis-0f1e2d3c", "https://as.test/t"])).toEqual([]);
      // Another home key opens nothing.
      expect(await stranger.mcp.binding("notes", "a")).toBeUndefined();
      expect(await stranger.mcp.registration("https://as.test")).toBeUndefined();
      // A value moved to another login, or changed, opens to nothing.
      const key = "kbseal:mcp:bindings";
      const sealed = (await raw.hget(key, JSON.stringify(["notes", "a"])))!;
      await raw.hset(key, JSON.stringify(["notes", "b"]), sealed);
      expect(await state.mcp.binding("notes", "b")).toBeUndefined();
      const flipped = Buffer.from(sealed, "base64");
      flipped[flipped.length - 1]! ^= 1;
      await raw.hset(key, JSON.stringify(["notes", "a"]), flipped.toString("base64"));
      expect(await state.mcp.binding("notes", "a")).toBeUndefined();
    } finally {
      await state.close();
      await stranger.close();
    }
  });
});
