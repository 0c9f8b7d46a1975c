// The fleet's shared state on a real redis-server, in process: marks applied extend-only on the
// server, logins sealed and fenced, the refresh lock, and a dead Redis that fails fast.
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { UserError } from "../../core/errors.js";
import { PoolState } from "../../secrets/pool.js";
import { SealedMarks } from "../../state/marks/sealed.js";
import { TokenCipher } from "../../state/redis/cipher.js";
import { RedisState } from "../../state/redis/state.js";
import type { StoredLogin } from "../../state/tokens/login.js";
import { type RedisServer, startRedis } from "../helpers/redis.js";

const PASSWORD = `pw-${randomBytes(8).toString("hex")}`;
const KEY = randomBytes(32);
let server: RedisServer;
let raw: Redis;
const opened: RedisState[] = [];
async function open(homeKey = KEY, prefix = "t:", warnings: string[] = []) {
  const state = await RedisState.open(
    { url: server.url, password: "env:PW", prefix },
    {
      home: mkdtempSync(join(tmpdir(), "kb-fleet-")),
      homeKey: () => homeKey,
      resolve: async (ref) => (ref === "env:PW" ? PASSWORD : undefined),
      log: { warn: (m) => warnings.push(m), info: () => {} },
    },
  );
  opened.push(state);
  return state;
}

function login(over: Partial<StoredLogin> = {}): StoredLogin {
  const now = Date.now();
  return {
    provider: "p-oauth",
    id: "default",
    accessToken: `at-${randomBytes(12).toString("hex")}`,
    refreshToken: `rt-${randomBytes(12).toString("hex")}`,
    expiresAt: now + 60_000,
    issuedAt: now,
    createdAt: now,
    generation: 1,
    state: "ok",
    ...over,
  };
}

async function until(check: () => boolean | Promise<boolean>, what: string, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Taking the refresh lock fails (rather than waiting out its 10 s, or refreshing without it). */
async function refreshRefused(state: RedisState, id: string): Promise<void> {
  const lock = state.tokens.withRefreshLock(
    "p-oauth",
    id,
    { staleMs: 10_000, waitMs: 10_000 },
    async () => "refreshed",
  );
  await expect(lock).rejects.toThrow(/did not answer/);
}

beforeAll(async () => {
  server = await startRedis({ password: PASSWORD });
  raw = server.client();
});
afterAll(async () => {
  for (const s of opened) await s.close();
  raw.disconnect();
  await server.stop();
});

describe("fleet state on Redis", () => {
  it("a mark only ever extends, on the server and in every broker's copy", async () => {
    const [a, b] = [await open(), await open()];
    const pa = new PoolState(mkdtempSync(join(tmpdir(), "kb-pool-")));
    const pb = new PoolState(mkdtempSync(join(tmpdir(), "kb-pool-")));
    a.attachPools(pa);
    b.attachPools(pb);
    const long = Date.now() + 600_000;
    pa.markUsageLimit("openai", "KEY_A", long, "429");
    await until(() => pb.get("openai", "KEY_A").until === long, "the mark to reach the other broker");
    // A shorter mark made later on the other broker does not shorten it, anywhere.
    pb.markUsageLimit("openai", "KEY_A", Date.now() + 5_000, "429");
    await until(
      async () => (await raw.hget("t:sealed-marks", JSON.stringify(["openai", "KEY_A"]))) !== null,
      "the mark",
    );
    await new Promise((r) => setTimeout(r, 100));
    // Sealed with the fleet's key (decision 111): it opens, bound to its field, and only so.
    const field = JSON.stringify(["openai", "KEY_A"]);
    const sealed = (await raw.hget("t:sealed-marks", field))!;
    expect(sealed).not.toContain(String(long));
    const marks = new SealedMarks(new TokenCipher(KEY), "t:sealed-marks", "t:events", () => {});
    expect(marks.open(field, sealed)?.until).toBe(long);
    expect(pa.get("openai", "KEY_A").until).toBe(long);
    expect(pb.get("openai", "KEY_A").until).toBe(long);
    // A reset clears it everywhere.
    pb.reset("openai", "KEY_A");
    await until(() => pa.get("openai", "KEY_A").state === "ok", "the reset to reach the other broker");
    expect(await raw.hget("t:sealed-marks", JSON.stringify(["openai", "KEY_A"]))).toBeNull();
  });

  it("a store is listening when it has opened: the fleet's next event reaches it", async () => {
    // Each store opens its own subscriber connection; open() waits for its SUBSCRIBE to be
    // answered, so a mark made on another broker right after cannot slip past it.
    for (let i = 0; i < 8; i++) {
      const prefix = `sub${i}:`;
      const state = await open(KEY, prefix);
      const [, listeners] = (await raw.pubsub("NUMSUB", `${prefix}events`)) as [string, number];
      expect(listeners, `store ${i}`).toBe(1);
      const pools = new PoolState(mkdtempSync(join(tmpdir(), "kb-pool-")));
      state.attachPools(pools);
      const other = await open(KEY, prefix);
      const until2 = Date.now() + 600_000;
      const otherPools = new PoolState(mkdtempSync(join(tmpdir(), "kb-pool-")));
      other.attachPools(otherPools);
      otherPools.markUsageLimit("openai", "KEY_A", until2, "429");
      await until(() => pools.get("openai", "KEY_A").until === until2, `the mark to reach store ${i}`);
    }
  });

  it("logins are sealed in Redis, open only with the fleet's home key, and fenced on their generation", async () => {
    const a = await open();
    const first = login();
    expect(await a.tokens.put(first)).toBe(true);
    const value = (await raw.hget("t:logins", JSON.stringify(["p-oauth", "default"])))!;
    expect(value).not.toContain(first.accessToken);
    expect(value).not.toContain(first.refreshToken);
    expect(Buffer.from(value.split(":")[2]!, "base64").includes(first.accessToken)).toBe(false);
    expect((await a.tokens.get("p-oauth", "default"))?.accessToken).toBe(first.accessToken);
    // Another home key (a broker whose home.key was not copied) reads no login at all.
    const stranger = await open(randomBytes(32));
    expect(await stranger.tokens.get("p-oauth", "default")).toBeUndefined();
    // Fencing: a write over a generation that is no longer stored writes nothing.
    expect(await a.tokens.put({ ...first, generation: 2 }, 1)).toBe(true);
    expect(await a.tokens.put({ ...first, accessToken: "at-stale", generation: 2 }, 1)).toBe(false);
    expect((await a.tokens.get("p-oauth", "default"))?.generation).toBe(2);
  });

  it("a holder that stalled past its refresh lock cannot overwrite the token written after it", async () => {
    const [a, b] = [await open(), await open()];
    const base = login({ id: "locked", generation: 5 });
    await a.tokens.put(base);
    const lockKey = `t:lock:${JSON.stringify(["p-oauth", "locked"])}`;
    const opts = { staleMs: 60_000, waitMs: 5_000 };
    const stale = await a.tokens.withRefreshLock("p-oauth", "locked", opts, async () => {
      // The holder stalls: its lock expires (made to expire now instead of waiting a minute),
      // the other broker takes the lock and stores a refreshed login.
      await raw.pexpire(lockKey, 1);
      await until(async () => (await raw.exists(lockKey)) === 0, "the lock to expire");
      await b.tokens.withRefreshLock("p-oauth", "locked", opts, () =>
        b.tokens.put({ ...base, accessToken: "at-newer", generation: 6 }, 5),
      );
      // Even a write over the right generation is refused: the lock is no longer this holder's.
      await b.tokens.put({ ...base, accessToken: "at-newer-2", generation: 7 }, 6);
      return a.tokens.put({ ...base, accessToken: "at-stale", generation: 8 }, 7);
    });
    expect(stale).toBe(false);
    expect((await b.tokens.get("p-oauth", "locked"))?.accessToken).toBe("at-newer-2");
    // While one holder has it, another waits, then gives up.
    await expect(
      a.tokens.withRefreshLock("p-oauth", "locked", { staleMs: 60_000, waitMs: 5_000 }, () =>
        b.tokens.withRefreshLock("p-oauth", "locked", { staleMs: 60_000, waitMs: 200 }, async () => "taken"),
      ),
    ).rejects.toThrow(/held by another broker/);
  });

  it("Redis slow (every client paused): commands time out instead of hanging, and the state says degraded", async () => {
    const warnings: string[] = [];
    const a = await open(KEY, "t:", warnings);
    await raw.call("CLIENT", "PAUSE", "4000", "ALL");
    const started = Date.now();
    await refreshRefused(a, "slow");
    // The command timeout (2 s), not the lock's 10 s wait (a bound, not a speed measurement).
    expect(Date.now() - started).toBeLessThan(8_000);
    expect(a.health().degradedSince).toBeDefined();
    await until(() => a.health().degradedSince === undefined, "the recovery after the pause", 15_000);
    expect(warnings.filter((w) => w.includes("unreachable"))).toHaveLength(1);
  });

  it("a store opened while Redis is unreachable opens degraded within its connect timeout", async () => {
    const warnings: string[] = [];
    const down = await RedisState.open(
      { url: "redis://127.0.0.1:1/0", prefix: "t:" },
      {
        home: mkdtempSync(join(tmpdir(), "kb-fleet-")),
        homeKey: () => KEY,
        resolve: async () => undefined,
        log: { warn: (m) => warnings.push(m), info: () => {} },
      },
    );
    opened.push(down);
    expect(down.health().degradedSince).toBeDefined();
    await expect(down.tokens.list()).rejects.toThrow(/did not answer/);
    expect(warnings).toHaveLength(1);
  });

  it("Redis down: commands fail at once, the state says degraded, and it recovers", async () => {
    const warnings: string[] = [];
    const a = await open(KEY, "t:", warnings);
    const pa = new PoolState(mkdtempSync(join(tmpdir(), "kb-pool-")));
    a.attachPools(pa);
    await a.tokens.put(login({ id: "outage" }));
    await server.stop();
    await until(() => a.health().degradedSince !== undefined, "the degraded state");
    const started = Date.now();
    await refreshRefused(a, "outage");
    await expect(a.tokens.get("p-oauth", "outage")).rejects.toThrow(/did not answer/);
    // Fast, not a hang: far below the lock's wait (a bound, not a speed measurement).
    expect(Date.now() - started).toBeLessThan(5_000);
    // A mark made meanwhile reaches Redis when it is back.
    pa.markUsageLimit("openai", "KEY_OUT", Date.now() + 600_000, "429");
    await server.restart();
    await until(() => a.health().degradedSince === undefined, "the recovery", 10_000);
    await until(
      async () =>
        (await raw.hget("t:sealed-marks", JSON.stringify(["openai", "KEY_OUT"])).catch(() => null)) !== null,
      "the mark made during the outage",
    );
    expect(warnings.filter((w) => w.includes("unreachable"))).toHaveLength(1);
    expect(warnings.filter((w) => w.includes("reachable again"))).toHaveLength(1);
    expect(warnings.join("\n")).not.toContain(PASSWORD);
  });

  it("a wrong or a missing password is named with its fix; a password reference with no value stops the start", async () => {
    const opts = (password: string | undefined) => ({
      home: mkdtempSync(join(tmpdir(), "kb-fleet-")),
      homeKey: () => KEY,
      resolve: async () => password,
      log: { warn: () => {}, info: () => {} },
    });
    const wrong = await RedisState.open(
      { url: server.url, password: "env:PW", prefix: "w:" },
      opts("not-the-password"),
    );
    opened.push(wrong);
    expect(wrong.health().error).toMatch(
      /^Redis refused the password \(WRONGPASS.*check the value of state\.password$/,
    );
    const none = await RedisState.open({ url: server.url, prefix: "n:" }, opts(undefined));
    opened.push(none);
    expect(none.health().error).toMatch(
      /^Redis asks for a password \(NOAUTH.*add password: <credential reference> to state:/,
    );
    const unset = RedisState.open(
      { url: server.url, password: "env:KB_TEST_UNSET_REDIS_PW", prefix: "u:" },
      opts(undefined),
    );
    await expect(unset).rejects.toThrow(UserError);
    await expect(unset).rejects.toThrow("set KB_TEST_UNSET_REDIS_PW in the broker's environment");
  });
});
