// A Redis writer without the fleet's home key puts back a sealed mark it read before a person
// reset the credential (decision 137; docs/reliability.md "Hardening 3", "Found in review"). The
// value still opens (it is the brokers' own), but it was made before the reset: the brokers that
// saw the reset, and one that starts afterwards and knows the reset only from its sealed
// tombstone, keep the credential usable. A mark made after the reset still reaches every broker.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, expect, it } from "vitest";
import { PoolState } from "../../secrets/pool.js";
import type { RedisState } from "../../state/redis/state.js";
import { tempHome } from "../helpers/broker.js";
import { openFleetState, until } from "../helpers/fleet.js";
import { type RedisServer, startRedis } from "../helpers/redis.js";

const PASSWORD = "redis-pw-replay-7c1e5a9b";
const PREFIX = "kbreplay:";
const MARKS = `${PREFIX}sealed-marks`;
const key = randomBytes(32);

let redis: RedisServer;
const opened: RedisState[] = [];

beforeAll(async () => {
  redis = await startRedis({ password: PASSWORD });
});

afterAll(async () => {
  for (const s of opened) await s.close();
  await redis?.stop();
});

async function broker(): Promise<{ state: RedisState; pools: PoolState }> {
  const state = await openFleetState(redis.url, PASSWORD, PREFIX, tempHome(), () => key);
  opened.push(state);
  const pools = new PoolState(tempHome());
  state.attachPools(pools);
  await state.settled();
  return { state, pools };
}

const stateOf = (b: { pools: PoolState }) => b.pools.get("pooled", "KEY_A").state;

it("a sealed mark put back after a reset, and the brokers made to read the hash again: the credential stays usable", async () => {
  const raw = redis.client();
  try {
    const a = await broker();
    const b = await broker();
    a.pools.markInvalid("pooled", "KEY_A", "401 from upstream");
    await a.state.settled();
    await until(async () => stateOf(b) === "invalid", "b sees the mark");
    const captured = await raw.hgetall(MARKS);
    expect(Object.keys(captured)).toEqual([JSON.stringify(["pooled", "KEY_A"])]);

    a.pools.reset("pooled", "KEY_A");
    await a.state.settled();
    await until(async () => stateOf(b) === "ok", "b sees the reset");
    expect(await raw.hlen(MARKS)).toBe(0);

    // The writer puts the old value back and cuts the brokers off, so they read the hash again.
    for (const [f, v] of Object.entries(captured)) await raw.hset(MARKS, f, v);
    const before = Math.max(...clientIds(String(await raw.call("CLIENT", "LIST"))));
    await raw.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes");
    await raw.call("CLIENT", "KILL", "TYPE", "pubsub");
    // Both connections of both brokers back, and each broker merged again (no longer degraded).
    await until(
      async () => clientIds(String(await raw.call("CLIENT", "LIST"))).filter((id) => id > before).length >= 4,
      "the brokers reconnect",
    );
    await until(
      async () => [a, b].every((x) => x.state.health().degradedSince === undefined),
      "the brokers merge again",
    );
    await Promise.all([a.state.settled(), b.state.settled()]);
    expect([stateOf(a), stateOf(b)]).toEqual(["ok", "ok"]);

    // A broker started now knows the reset only from Redis: its sealed tombstone.
    const c = await broker();
    expect(stateOf(c)).toBe("ok");

    // A mark made after the reset is a real one: every broker takes it in.
    b.pools.markInvalid("pooled", "KEY_A", "401 again");
    await b.state.settled();
    await until(async () => stateOf(a) === "invalid" && stateOf(c) === "invalid", "a and c see the new mark");
  } finally {
    raw.disconnect();
  }
});

function clientIds(list: string): number[] {
  return [...list.matchAll(/\bid=(\d+)/g)].map((m) => Number(m[1]));
}
