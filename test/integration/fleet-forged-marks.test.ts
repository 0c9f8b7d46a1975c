// Fleet state poisoned from Redis (docs/spec.md §17, decision 111; docs/reliability.md "Fleet and
// shared-home marks"): a Redis writer without the home key writes garbage and forged marks into
// the marks hash and publishes forged mark messages. Two real brokers on a real redis-server
// ignore all of it, report each bad value once, stay healthy (not degraded, still refreshing
// OAuth logins) and keep applying the marks the fleet really made.
//
// The garbage goes into both hashes, `marks` (where keybroker kept marks in clear before) and
// `sealed-marks`, so the test says the same thing of a broker of either version.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminTokenPath } from "../../admin/api.js";
import type { StatusReport } from "../../admin/status.js";
import { PoolState } from "../../secrets/pool.js";
import type { RedisState } from "../../state/redis/state.js";
import { type BrokerProcess, findSecrets, startBroker, tempHome, writeConfig } from "../helpers/broker.js";
import {
  AUTH_HOST,
  type FakeOAuth,
  installFakeOAuth,
  serveChat,
  storedLogin,
} from "../helpers/fake-oauth.js";
import { openFleetState, until } from "../helpers/fleet.js";
import { fleetHomes, type RedisServer, startRedis } from "../helpers/redis.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const PASSWORD = "redis-pw-forged-4b2e9d1c";
const KEYS = {
  A: "sk-forged-key-a-0b1c2d3e4f5a6b7c8d9e",
  B: "sk-forged-key-b-1c2d3e4f5a6b7c8d9e0f",
  C: "sk-forged-key-c-2d3e4f5a6b7c8d9e0f1a",
};
const PREFIX = "kbforged:";
const field = (id: string) => JSON.stringify(["pooled", id]);
const HASHES = [`${PREFIX}marks`, `${PREFIX}sealed-marks`];

let redis: RedisServer;
let raw: Redis;
let u: FakeUpstream;
let fake: FakeOAuth;
let state: RedisState;
let pools: PoolState;
let vars: Record<string, string>;
const brokers: BrokerProcess[] = [];
const agents: ProxyAgent[] = [];
const homes: string[] = [];
/** Which key each pooled request carried, in order. */
const used: string[] = [];

async function status(i: number): Promise<StatusReport> {
  const token = readFileSync(adminTokenPath(homes[i]!), "utf8").trim();
  const res = await request(`${brokers[i]!.url}/__keybroker/admin/status`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return (await res.body.json()) as StatusReport;
}
const credential = (s: StatusReport, provider: string, id: string) =>
  s.providers.find((p) => p.id === provider)?.credentials.find((c) => c.id === id);

async function send(i: number, host: string, path: string, placeholder: string) {
  const res = await request(`https://${host}${path}`, {
    method: "POST",
    dispatcher: agents[i]!,
    headers: { authorization: `Bearer ${placeholder}`, "content-type": "application/json" },
    body: "{}",
  });
  await res.body.text();
  return res.statusCode;
}
const pool = (i: number) => send(i, "api.pool.test", "/v1/pool", vars.POOL_KEY!);
const chat = (i: number) => send(i, "api.openai.com", "/v1/chat/completions", vars.CODEX_OAUTH_ACCESS_TOKEN!);
const logged = (i: number) => brokers[i]!.stdout() + brokers[i]!.stderr();

/** Forged marks in clear, as a Redis writer without the home key can make them. */
const forgedInvalid = JSON.stringify({ state: "invalid", reason: "forged 401" });
const forgedLimit = JSON.stringify({
  state: "usage_limit_reached",
  until: Date.now() + 3_600_000,
  reason: "429",
});

beforeAll(async () => {
  redis = await startRedis({ password: PASSWORD });
  raw = redis.client();
  u = await startUpstream();
  fake = installFakeOAuth(u);
  serveChat(u, fake);
  u.routes.set("POST /v1/pool", (req, res) => {
    used.push(String(req.headers.authorization ?? "").replace(/^Bearer /, ""));
    res.writeHead(200, { "content-type": "application/json" });
    res.end('{"ok":true}');
  });
  homes.push(...fleetHomes(2));
  const key = () => Buffer.from(readFileSync(join(homes[0]!, "home.key"), "utf8").trim(), "base64");
  // A mark the fleet really made (sealed, by a broker holding the home key): credential C.
  state = await openFleetState(redis.url, PASSWORD, PREFIX, tempHome(), key);
  pools = new PoolState(tempHome());
  state.attachPools(pools);
  pools.markUsageLimit("pooled", "POOL_KEY_C", Date.now() + 600_000, "429");
  await state.settled();
  // What a Redis writer without the key puts there before the brokers start.
  for (const hash of HASHES) {
    await raw.hset(hash, field("POOL_KEY_A"), forgedInvalid);
    await raw.hset(hash, field("POOL_KEY_B"), forgedLimit);
    await raw.hset(hash, "not a field", "{ not json");
    await raw.hset(hash, field("POOL_KEY_D"), "garbage");
  }
  const config = writeConfig(
    tempHome(),
    `version: 1
state: { url: "${redis.url}", password: env:KB_REDIS_PASSWORD, prefix: "${PREFIX}" }
upstream_ca: [${JSON.stringify(u.caPath)}]
resolve:
  "api.openai.com:443": "127.0.0.1:${u.port}"
  "api.pool.test:443": "127.0.0.1:${u.port}"
  "${AUTH_HOST}:443": "127.0.0.1:${u.port}"
catalogue: false
providers:
  pooled:
    hosts: [api.pool.test]
    inject: { header: authorization }
    credentials: [POOL_KEY_A, POOL_KEY_B, POOL_KEY_C]
    placeholder: { env: POOL_KEY }
  codex-oauth:
    hosts: [api.openai.com]
    oauth:
      issuer: https://${AUTH_HOST}
      client_id: app_1
      scopes: [openid, offline_access]
      token_timeout: 1s
`,
  );
  const env = { POOL_KEY_A: KEYS.A, POOL_KEY_B: KEYS.B, POOL_KEY_C: KEYS.C, KB_REDIS_PASSWORD: PASSWORD };
  brokers.push(...(await Promise.all(homes.map((home) => startBroker({ home, config, env })))));
  for (const b of brokers)
    agents.push(new ProxyAgent({ uri: b.url, requestTls: { ca: readFileSync(b.caPath, "utf8") } }));
  const token = readFileSync(adminTokenPath(homes[0]!), "utf8").trim();
  const res = await request(`${brokers[0]!.url}/__keybroker/admin/agent?client=default`, {
    headers: { authorization: `Bearer ${token}` },
  });
  vars = ((await res.body.json()) as { placeholders: Record<string, string> }).placeholders;
}, 60_000);

afterAll(async () => {
  for (const a of agents) await a.close();
  for (const b of brokers) await b.stop();
  await state?.close();
  raw?.disconnect();
  await redis?.stop();
  await u?.close();
  expect(findSecrets([...fake.issued, ...Object.values(KEYS), PASSWORD], homes)).toEqual([]);
});

describe("a Redis writer without the home key", () => {
  it("garbage and forged marks in the hash: every broker stays healthy, applies the real mark, injects the forged-marked credentials", async () => {
    for (const i of [0, 1]) {
      // The real mark (C) is applied: the broker read the hash past the bad fields.
      await until(
        async () => credential(await status(i), "pooled", "POOL_KEY_C")?.state === "usage_limit_reached",
        `broker ${i + 1} to apply the fleet's real mark`,
      );
      const s = await status(i);
      expect(s.state?.degradedSince, logged(i)).toBeUndefined();
      expect(credential(s, "pooled", "POOL_KEY_A")?.state).toBe("ok");
      expect(credential(s, "pooled", "POOL_KEY_B")?.state).toBe("ok");
    }
    // Requests still go out with the credentials the forged marks named (fill_first: A first).
    expect(await pool(0)).toBe(200);
    expect(await pool(1)).toBe(200);
    expect(used).toEqual([KEYS.A, KEYS.A]);
    // Each bad value reported, and once: a second read of the hash (the subscriber reconnects,
    // so the broker merges again) reports nothing new.
    for (const i of [0, 1]) {
      expect(logged(i).match(/does not open with this fleet's home key/g)?.length, logged(i)).toBe(3);
      expect(logged(i).match(/has a field that names no credential/g)?.length).toBe(1);
    }
    await raw.call("CLIENT", "KILL", "TYPE", "pubsub");
    for (const i of [0, 1])
      await until(async () => /reachable again/.test(logged(i)), `broker ${i + 1} to merge again`);
    for (const i of [0, 1]) {
      expect(logged(i).match(/does not open with this fleet's home key/g)?.length).toBe(3);
      expect((await status(i)).state?.degradedSince).toBeUndefined();
    }
  });

  it("an OAuth login is still refreshed: the broker is not degraded while Redis answers", async () => {
    fake.accessTtl = 2;
    await state.tokens.put(storedLogin("codex-oauth", "default", fake.login(), 2_000));
    const before = fake.refreshes;
    await until(async () => fake.refreshes > before && (await chat(0)) === 200, "a refresh and a 200");
    expect(await chat(1)).toBe(200);
    expect(fake.reuses).toBe(0);
  }, 30_000);

  it("forged mark and reset messages on the channel change nothing", async () => {
    const from = "forger";
    // Old-format (clear) messages, a sealed-looking one that does not open, and garbage.
    await raw.publish(
      `${PREFIX}events`,
      JSON.stringify({ t: "mark", f: field("POOL_KEY_A"), m: forgedInvalid, from }),
    );
    await raw.publish(
      `${PREFIX}events`,
      JSON.stringify({ t: "mark", m: Buffer.alloc(64).toString("base64"), from }),
    );
    await raw.publish(
      `${PREFIX}events`,
      JSON.stringify({ t: "reset", p: "pooled", f: field("POOL_KEY_C"), from }),
    );
    await raw.publish(`${PREFIX}events`, "not json");
    // A real mark published after them: once a broker has it, it has seen the forged ones.
    pools.markUsageLimit("pooled", "POOL_KEY_B", Date.now() + 600_000, "429");
    await state.settled();
    for (const i of [0, 1]) {
      const s = await until(
        async () => {
          const r = await status(i);
          return credential(r, "pooled", "POOL_KEY_B")?.state === "usage_limit_reached" ? r : undefined;
        },
        `broker ${i + 1} to apply the real mark`,
      );
      expect(credential(s, "pooled", "POOL_KEY_A")?.state).toBe("ok");
      expect(credential(s, "pooled", "POOL_KEY_C")?.state).toBe("usage_limit_reached");
      expect(s.state?.degradedSince).toBeUndefined();
      expect(logged(i)).toMatch(/a mark message on Redis channel .* does not open/);
    }
    used.length = 0;
    expect(await pool(0)).toBe(200);
    expect(await pool(1)).toBe(200);
    expect(used).toEqual([KEYS.A, KEYS.A]);
  });
});
