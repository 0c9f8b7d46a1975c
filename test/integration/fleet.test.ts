// Fleet mode (docs/spec.md §17): three brokers, each with its own home (the CA and home key copied from
// the first, as the README says), on one real redis-server with a password. A 429 seen by one
// marks the credential for all; short-lived OAuth tokens under load across all three are
// refreshed with zero refresh-token reuse; a broker frozen while holding the refresh lock does
// not stop the others and does no harm when it wakes; Redis stopped and started empty fails no
// request that had a valid credential; no token is ever in clear in Redis.
import { cpSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminTokenPath } from "../../admin/api.js";
import { formatStatus, type StatusReport } from "../../admin/status.js";
import type { RedisState } from "../../state/redis/state.js";
import type { StoredLogin } from "../../state/tokens/login.js";
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
  serveChat,
  storedLogin,
} from "../helpers/fake-oauth.js";
import { openFleetState, until } from "../helpers/fleet.js";
import { fleetHomes, redisLeaks as leaksIn, type RedisServer, startRedis } from "../helpers/redis.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const PASSWORD = "redis-pw-5e1d9c7b3a";
const KEYS = {
  A: "sk-fleet-key-a-0b1c2d3e4f5a6b7c8d9e",
  B: "sk-fleet-key-b-1c2d3e4f5a6b7c8d9e0f",
  C: "sk-fleet-key-c-2d3e4f5a6b7c8d9e0f1a",
};
const PREFIX = "kbfleet:";

let redis: RedisServer;
let raw: Redis;
let u: FakeUpstream;
let fake: FakeOAuth;
let config: string;
const brokers: BrokerProcess[] = [];
const agents: ProxyAgent[] = [];
const homes: string[] = [];
let state: RedisState;
let vars: Record<string, string>;
/** Which pool keys the upstream answers 429 for, and how often each was used. */
const exhausted = new Set<string>();
const hits = new Map<string, number>();

/** A broker's admin API, which `status --json` and `env` read. */
async function admin<T>(i: number, action: string): Promise<T> {
  const token = readFileSync(adminTokenPath(homes[i]!), "utf8").trim();
  const res = await request(`${brokers[i]!.url}/__keybroker/admin/${action}`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return (await res.body.json()) as T;
}
const status = (i: number) => admin<StatusReport>(i, "status");

function credential(s: StatusReport, provider: string, id: string) {
  return s.providers.find((p) => p.id === provider)?.credentials.find((c) => c.id === id);
}

async function send(i: number, host: string, path: string, placeholder: string) {
  const res = await request(`https://${host}${path}`, {
    method: "POST",
    dispatcher: agents[i]!,
    headers: { authorization: `Bearer ${placeholder}`, "content-type": "application/json" },
    body: "{}",
  });
  const text = await res.body.text();
  return { status: res.statusCode, code: res.headers["x-keybroker-error"], text };
}
const pool = (i: number) => send(i, "api.pool.test", "/v1/pool", vars.POOL_KEY!);
const chat = (i: number) => send(i, "api.openai.com", "/v1/chat/completions", vars.CODEX_OAUTH_ACCESS_TOKEN!);
const chat2 = (i: number) => send(i, "api.two.test", "/v1/chat/completions", vars.CODEX2_OAUTH_ACCESS_TOKEN!);

/** Requests on every lane of `on` until `done()`; the statuses seen. */
async function load(on: number[], call: (i: number) => Promise<{ status: number }>, done: () => boolean) {
  const statuses: number[] = [];
  const deadline = Date.now() + 30_000;
  await Promise.all(
    on.flatMap((i) =>
      [0, 1, 2].map(async () => {
        while (!done() && Date.now() < deadline)
          statuses.push((await call(i).catch(() => ({ status: 0 }))).status);
      }),
    ),
  );
  expect(done()).toBe(true);
  return statuses;
}

function oauthLogin(provider: string, id: string, lifetimeMs?: number): StoredLogin {
  const t = fake.login();
  return storedLogin(provider, id, t, lifetimeMs);
}

/** Every key in Redis searched for every token and key. */
const redisLeaks = () => leaksIn(raw, [...fake.issued, ...Object.values(KEYS)]);

beforeAll(async () => {
  redis = await startRedis({ password: PASSWORD });
  raw = redis.client();
  u = await startUpstream();
  fake = installFakeOAuth(u);
  serveChat(u, fake);
  u.routes.set("POST /v1/pool", (req, res) => {
    const key = String(req.headers.authorization ?? "").replace(/^Bearer /, "");
    hits.set(key, (hits.get(key) ?? 0) + 1);
    const out = exhausted.has(key);
    res.writeHead(out ? 429 : 200, {
      "content-type": "application/json",
      ...(out ? { "retry-after": "600" } : {}),
    });
    res.end(JSON.stringify(out ? { error: { type: "rate_limit_error" } } : { ok: true }));
  });
  const dir = tempHome();
  const oauth = `
    oauth:
      issuer: https://${AUTH_HOST}
      client_id: app_1
      scopes: [openid, offline_access]
      token_timeout: 1s`;
  config = writeConfig(
    dir,
    `version: 1
state: { url: "${redis.url}", password: env:KB_REDIS_PASSWORD, prefix: "${PREFIX}" }
upstream_ca: [${JSON.stringify(u.caPath)}]
resolve:
  "api.openai.com:443": "127.0.0.1:${u.port}"
  "api.two.test:443": "127.0.0.1:${u.port}"
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
    hosts: [api.openai.com]${oauth}
  codex2-oauth:
    hosts: [api.two.test]${oauth}
`,
  );
  const env = { POOL_KEY_A: KEYS.A, POOL_KEY_B: KEYS.B, POOL_KEY_C: KEYS.C, KB_REDIS_PASSWORD: PASSWORD };
  // One CA and home key for the fleet (README: Running a fleet). The three then start at once.
  homes.push(...fleetHomes(3));
  brokers.push(...(await Promise.all(homes.map((home) => startBroker({ home, config, env })))));
  for (const b of brokers)
    agents.push(new ProxyAgent({ uri: b.url, requestTls: { ca: readFileSync(b.caPath, "utf8") } }));
  // The third broker's placeholders serve on all three: the copied home key makes them agree.
  vars = (await admin<{ placeholders: Record<string, string> }>(2, "agent?client=default")).placeholders;
  state = await openFleetState(redis.url, PASSWORD, PREFIX, homes[0]!, () =>
    Buffer.from(readFileSync(join(homes[0]!, "home.key"), "utf8").trim(), "base64"),
  );
}, 60_000);

afterAll(async () => {
  for (const a of agents) await a.close();
  for (const b of brokers) await b.stop();
  await state?.close();
  raw?.disconnect();
  await redis?.stop();
  await u?.close();
  // No token, key or the Redis password anywhere a broker wrote, nor in any home.
  expect(findSecrets([...fake.issued, ...Object.values(KEYS), PASSWORD], homes)).toEqual([]);
});

describe("three brokers on one Redis", () => {
  it("a 429 seen by one broker marks the credential for all of them", async () => {
    exhausted.add(KEYS.A);
    expect((await pool(0)).status).toBe(200);
    expect(hits.get(KEYS.A)).toBe(1);
    for (const i of [1, 2]) {
      const marked = await until(
        async () => {
          const c = credential(await status(i), "pooled", "POOL_KEY_A");
          return c?.state === "usage_limit_reached" ? c : undefined;
        },
        `the mark on broker ${i + 1}`,
      );
      expect(Date.parse(marked.until!)).toBeGreaterThan(Date.now() + 500_000);
    }
    // The other brokers skip the marked key: it got no second request.
    expect((await pool(1)).status).toBe(200);
    expect((await pool(2)).status).toBe(200);
    expect(hits.get(KEYS.A)).toBe(1);
    expect(hits.get(KEYS.B)).toBe(3);
  });

  it("short-lived OAuth tokens under concurrent load on all three: zero refresh-token reuse", async () => {
    fake.accessTtl = 2;
    await state.tokens.put(oauthLogin("codex-oauth", "default"));
    for (const i of [0, 1, 2])
      await until(async () => (await chat(i)).status === 200, `broker ${i + 1} serving`);
    const start = fake.refreshes;
    const statuses = await load([0, 1, 2], chat, () => fake.refreshes >= start + 4);
    expect(fake.reuses).toBe(0);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    expect(await redisLeaks()).toEqual([]);
  }, 60_000);

  it("a broker frozen while holding the refresh lock: the others go on, and it does no harm when it wakes", async () => {
    const pids = new Map(brokers.map((b, i) => [b.child.pid!, i]));
    let frozen: number | undefined;
    let checking = false;
    const lockKey = `${PREFIX}lock:${JSON.stringify(["codex-oauth", "default"])}`;
    // MONITOR on a plain socket: each command as Redis runs it, so the holder of the lock is
    // frozen the moment it takes it. Redis shows the SET before the broker has its answer, so
    // the token endpoint is told to hold what comes next before any refresh can reach it: a
    // refresh the holder sent before SIGSTOP landed (a loaded machine) is then dropped unread,
    // as a request lost on the way, and the test stays the one it names.
    const monitor = connect(redis.port, "127.0.0.1");
    monitor.write(`AUTH ${PASSWORD}\r\nMONITOR\r\n`);
    let seen = "";
    monitor.on("data", (d: Buffer) => {
      seen = (seen + d.toString()).slice(-4096);
      const m = /"set" "kbfleet:lock:(?:[^"\\]|\\.)*" "(\d+):/i.exec(seen);
      if (frozen !== undefined || checking || m === null || !pids.has(Number(m[1]))) return;
      seen = "";
      const pid = Number(m[1]);
      let release!: (how?: "drop") => void;
      fake.stall = new Promise((r) => {
        release = r;
      });
      process.kill(pid, "SIGSTOP");
      // A SET NX that lost the race took no lock: that broker is let go, and the watch goes on.
      checking = true;
      void raw.get(lockKey).then((holder) => {
        checking = false;
        fake.stall = undefined;
        if (holder?.startsWith(`${pid}:`)) {
          frozen = pids.get(pid);
          release("drop");
        } else {
          process.kill(pid, "SIGCONT");
          release();
        }
      });
    });
    try {
      // Tokens live 2 s and are refreshed ahead: some broker takes the lock within moments.
      const i = await until(async () => frozen, "a broker to take the refresh lock");
      const atFreeze = fake.refreshes;
      const others = [0, 1, 2].filter((n) => n !== i);
      // Its lock expires (token_timeout 1 s + 5 s); another broker refreshes meanwhile.
      const statuses = await load(others, chat, () => fake.refreshes >= atFreeze + 2);
      process.kill(brokers[i]!.child.pid!, "SIGCONT");
      const after = fake.refreshes;
      statuses.push(...(await load([0, 1, 2], chat, () => fake.refreshes >= after + 2)));
      expect(fake.reuses).toBe(0);
      expect(statuses.filter((s) => s !== 200)).toEqual([]);
    } finally {
      if (frozen !== undefined) process.kill(brokers[frozen]!.child.pid!, "SIGCONT");
      monitor.destroy();
    }
  }, 60_000);

  it("Redis stopped and started empty: no request with a valid credential fails, and the brokers publish what they hold", async () => {
    // Long-lived tokens from the next refresh on: nothing needs refreshing during the outage...
    fake.accessTtl = 3600;
    const before = fake.refreshes;
    await until(async () => fake.refreshes > before, "a refresh that issues a long-lived token");
    for (const i of [0, 1, 2]) {
      await until(
        async () => {
          const c = credential(await status(i), "codex-oauth", "default");
          return c?.expiresAt !== undefined && Date.parse(c.expiresAt) > Date.now() + 600_000;
        },
        `broker ${i + 1} holding the long-lived token`,
      );
    }
    // ...except this login, whose token expires 4 s from now.
    await state.tokens.put(oauthLogin("codex2-oauth", "short", 4_000));
    for (const i of [0, 1, 2])
      await until(
        async () => credential(await status(i), "codex2-oauth", "short"),
        `broker ${i + 1} holding it`,
      );

    // (The broker frozen above logged its own stall: count from here.)
    const logged = brokers.map((b) => (b.stdout() + b.stderr()).length);
    await redis.stop();
    const duringOutage = fake.refreshes;
    let stop = false;
    const background = load([0, 1, 2], chat, () => stop);
    const report = await until(async () => {
      const s = await status(0);
      return s.state?.degradedSince === undefined ? undefined : s;
    }, "status to say degraded");
    expect(report.state?.store).toBe("redis");
    // The text `keybroker status` prints from that report.
    expect(formatStatus(report)).toMatch(/^state: degraded since \d{4}-\d\d-\d\dT/m);
    // A mark made during the outage, on one broker only.
    exhausted.add(KEYS.B);
    expect((await pool(1)).status).toBe(200);
    // The short token expires: no broker refreshes without the lock, the answer is a 503.
    await new Promise((r) =>
      setTimeout(r, Math.max(0, 4_200 - (Date.now() - Date.parse(report.state!.degradedSince!)))),
    );
    await until(async () => {
      const r = await chat2(0);
      return r.status === 503 && r.code === "credential_unavailable";
    }, "the expired token to give 503");
    expect(fake.refreshes).toBe(duringOutage);

    await redis.restart();
    for (const i of [0, 1, 2])
      await until(
        async () => (await status(i)).state?.degradedSince === undefined,
        `broker ${i + 1} recovered`,
      );
    stop = true;
    const statuses = await background;
    expect(statuses.length).toBeGreaterThan(0);
    // On a failure, the brokers' lines about it say whether Redis had anything to do with it.
    const said = () =>
      brokers.flatMap((b) =>
        (b.stdout() + b.stderr()).split("\n").filter((l) => /upstream|reach|50\d/.test(l)),
      );
    expect(
      statuses.filter((s) => s !== 200),
      said().join("\n"),
    ).toEqual([]);
    // The empty Redis got back both marks and both logins; the mark made on one broker reached the others.
    const marks = await until(async () => {
      const m = await raw.hgetall(`${PREFIX}sealed-marks`);
      return Object.keys(m).length >= 2 ? m : undefined;
    }, "the marks to be published again");
    expect(Object.keys(marks).sort()).toEqual(
      [JSON.stringify(["pooled", "POOL_KEY_A"]), JSON.stringify(["pooled", "POOL_KEY_B"])].sort(),
    );
    expect(Object.keys(await raw.hgetall(`${PREFIX}logins`)).sort()).toEqual(
      [JSON.stringify(["codex-oauth", "default"]), JSON.stringify(["codex2-oauth", "short"])].sort(),
    );
    await until(
      async () => credential(await status(2), "pooled", "POOL_KEY_B")?.state === "usage_limit_reached",
      "the outage's mark on the third broker",
    );
    // With the lock back, the expired login is refreshed and serves again.
    await until(async () => (await chat2(2)).status === 200, "the short login refreshed");
    expect(fake.reuses).toBe(0);
    for (const [i, b] of brokers.entries()) {
      const log = (b.stdout() + b.stderr()).slice(logged[i]);
      expect(log.split("is unreachable (").length - 1).toBe(1);
      expect(log.split("is reachable again").length - 1).toBe(1);
    }
    expect(await redisLeaks()).toEqual([]);
  }, 60_000);

  it("auth reset on a machine without a running broker clears the mark for the whole fleet", async () => {
    const operator = tempHome();
    cpSync(join(homes[0]!, "home.key"), join(operator, "home.key"));
    homes.push(operator);
    const r = await cliAsync(
      ["auth", "reset", "pooled", "--credential", "POOL_KEY_B", "--home", operator, "--config", config],
      {
        env: { KB_REDIS_PASSWORD: PASSWORD },
      },
    );
    expect(r.stdout).toContain("pooled: cleared POOL_KEY_B");
    expect(await raw.hget(`${PREFIX}sealed-marks`, JSON.stringify(["pooled", "POOL_KEY_B"]))).toBeNull();
    for (const i of [0, 1, 2])
      await until(
        async () => credential(await status(i), "pooled", "POOL_KEY_B")?.state === "ok",
        `the reset on broker ${i + 1}`,
      );
    expect(credential(await status(1), "pooled", "POOL_KEY_A")?.state).toBe("usage_limit_reached");
  });
});
