// One test body per store, run against each implementation of it (state/): the marks of two
// brokers, and admin sessions, in memory, in the home and in a fleet's Redis (a real
// redis-server). What differs between them is declared by the fixture, not special-cased in the
// body: home sessions are each broker's own, the others are shared.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { homeKey } from "../../core/home.js";
import { PoolState } from "../../secrets/pool.js";
import { HomeState } from "../../state/home-state.js";
import { MarkRoom, MemoryMarkStore } from "../../state/marks/memory.js";
import type { MarkStore } from "../../state/marks/store.js";
import { MemorySessionStore } from "../../state/sessions/memory.js";
import type { Session, SessionStore } from "../../state/sessions/store.js";
import { tempHome } from "../helpers/broker.js";
import { openFleetState, until } from "../helpers/fleet.js";
import { fleetHomes, type RedisServer, startRedis } from "../helpers/redis.js";

/** One broker's side of a shared state. */
interface Side {
  readonly pools: PoolState;
  readonly marks: MarkStore;
  readonly sessions: SessionStore;
}

interface Pair {
  readonly a: Side;
  readonly b: Side;
  /** True when a session one broker writes is read by the other. */
  readonly sharesSessions: boolean;
  close(): Promise<void>;
}

const PASSWORD = "contract-redis-pw";
let redis: RedisServer;
let prefixes = 0;

beforeAll(async () => {
  redis = await startRedis({ password: PASSWORD });
});

afterAll(async () => {
  await redis?.stop();
});

const fixtures: Record<string, () => Promise<Pair>> = {
  memory: async () => {
    const room = new MarkRoom();
    const sessions = new MemorySessionStore();
    const side = (): Side => {
      const pools = new PoolState(tempHome());
      const marks = new MemoryMarkStore(room);
      marks.attachPools(pools);
      return { pools, marks, sessions };
    };
    return { a: side(), b: side(), sharesSessions: true, close: async () => {} };
  },
  home: async () => {
    const home = tempHome();
    const states: HomeState[] = [];
    const side = (): Side => {
      const state = new HomeState(home);
      const pools = new PoolState(home);
      state.attachPools(pools);
      states.push(state);
      return { pools, marks: state, sessions: state.sessions };
    };
    const close = async () => {
      for (const s of states) await s.close();
    };
    return { a: side(), b: side(), sharesSessions: false, close };
  },
  redis: async () => {
    const [homeA, homeB] = fleetHomes(2);
    const prefix = `contract${prefixes++}:`;
    const side = async (home: string) => {
      const state = await openFleetState(redis.url, PASSWORD, prefix, home, () => homeKey(home));
      const pools = new PoolState(home);
      state.attachPools(pools);
      return { state, side: { pools, marks: state, sessions: state.sessions } };
    };
    const a = await side(homeA!);
    const b = await side(homeB!);
    return {
      a: a.side,
      b: b.side,
      sharesSessions: true,
      close: async () => {
        await a.state.close();
        await b.state.close();
      },
    };
  },
};

describe.each(Object.keys(fixtures))("%s state", (name) => {
  let pair: Pair;

  beforeAll(async () => {
    pair = await fixtures[name]!();
  });

  afterAll(async () => {
    await pair?.close();
  });

  it("marks: one broker's mark reaches the other, only ever extends, a refusal wins, a reset clears both", async () => {
    const { a, b } = pair;
    const now = Date.now();
    a.pools.markUsageLimit("p", "K1", now + 600_000, "HTTP 429");
    await until(async () => b.pools.get("p", "K1").until === now + 600_000, "K1's mark on b");

    // A shorter mark made on b does not shorten a's (nor b's own); K3, made after it, shows it arrived.
    b.pools.markUsageLimit("p", "K1", now + 300_000, "HTTP 429");
    b.pools.markUsageLimit("p", "K3", now + 300_000, "HTTP 429");
    await until(async () => a.pools.get("p", "K3").state === "usage_limit_reached", "K3's mark on a");
    expect(a.pools.get("p", "K1").until).toBe(now + 600_000);
    expect(b.pools.get("p", "K1").until).toBe(now + 600_000);

    // A longer one extends it everywhere.
    b.pools.markUsageLimit("p", "K1", now + 900_000, "HTTP 429");
    await until(async () => a.pools.get("p", "K1").until === now + 900_000, "K1 extended on a");

    // A refusal is not undone by a usage mark made elsewhere afterwards.
    a.pools.markInvalid("p", "K2", "HTTP 401", "fp-1");
    await until(async () => b.pools.get("p", "K2").state === "invalid", "K2 refused on b");
    expect(b.pools.get("p", "K2").fingerprint).toBe("fp-1");
    b.pools.markUsageLimit("p", "K2", now + 60_000, "HTTP 429");
    b.pools.markUsageLimit("p", "K4", now + 60_000, "HTTP 429");
    await until(async () => a.pools.get("p", "K4").state === "usage_limit_reached", "K4's mark on a");
    expect(a.pools.get("p", "K2").state).toBe("invalid");
    expect(b.pools.get("p", "K2").state).toBe("invalid");

    // A reset on b clears a's copy.
    expect(b.pools.reset("p", "K1")).toEqual(["K1"]);
    await until(async () => a.pools.get("p", "K1").state === "ok", "K1 reset on a");
    expect(a.pools.get("p", "K3").state).toBe("usage_limit_reached");
  });

  it("sessions: written, read back, updated and deleted; shared between brokers where the store is", async () => {
    const { a, b, sharesSessions } = pair;
    const now = Date.now();
    const session: Session = {
      key: `k-${name}-${now}`,
      role: "owner",
      via: "password",
      csrf: "csrf-token",
      createdAt: now,
      lastSeen: now,
    };
    expect(await a.sessions.get(session.key)).toBeUndefined();
    await a.sessions.put(session);
    expect(await a.sessions.get(session.key)).toEqual(session);
    expect(await b.sessions.get(session.key)).toEqual(sharesSessions ? session : undefined);

    const later: Session = { ...session, lastSeen: now + 1_000, flash: { kind: "ok", text: "saved" } };
    await a.sessions.put(later);
    expect(await a.sessions.get(session.key)).toEqual(later);
    if (sharesSessions) expect(await b.sessions.get(session.key)).toEqual(later);

    await (sharesSessions ? b : a).sessions.delete(session.key);
    expect(await a.sessions.get(session.key)).toBeUndefined();
    expect(await b.sessions.get(session.key)).toBeUndefined();
  });

  it("sessions: each key is its own, and a role or flash comes back as written", async () => {
    const { a } = pair;
    const now = Date.now();
    const admin: Session = {
      key: `x-${name}`,
      role: "admin",
      via: "client ops",
      csrf: "c1",
      createdAt: now,
      lastSeen: now,
    };
    const owner: Session = { ...admin, key: `y-${name}`, role: "owner", csrf: "c2" };
    await a.sessions.put(admin);
    await a.sessions.put(owner);
    expect((await a.sessions.get(admin.key))?.role).toBe("admin");
    expect((await a.sessions.get(owner.key))?.csrf).toBe("c2");
    await a.sessions.delete(admin.key);
    expect(await a.sessions.get(admin.key)).toBeUndefined();
    expect(await a.sessions.get(owner.key)).toEqual(owner);
  });
});
