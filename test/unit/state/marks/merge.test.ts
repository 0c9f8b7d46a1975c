// The one merge rule of pool marks (decision 112), used by a broker's own marks, the home's
// pools.json and a fleet's Redis alike; and the check a mark read from elsewhere passes.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { PoolState } from "../../../../secrets/pool.js";
import { HomeMarkStore } from "../../../../state/marks/home.js";
import { mergeMark, readMark, type SharedMark } from "../../../../state/marks/merge.js";

const NOW = 1_800_000_000_000;
const usage = (until: number, reason = "HTTP 429"): SharedMark => ({
  state: "usage_limit_reached",
  until,
  reason,
});
const invalid = (fingerprint?: string): SharedMark => ({
  state: "invalid",
  reason: "HTTP 401",
  ...(fingerprint === undefined ? {} : { fingerprint }),
});

describe("mergeMark", () => {
  it("a usage mark only ever extends: a later deadline wins, an earlier one never shortens it", () => {
    const later = usage(NOW + 600_000);
    const earlier = usage(NOW + 60_000);
    expect(mergeMark(earlier, later, NOW)).toBe(later);
    expect(mergeMark(later, earlier, NOW)).toBe(later);
    expect(mergeMark(later, usage(NOW + 600_000), NOW)).toBe(later);
    expect(mergeMark(undefined, earlier, NOW)).toBe(earlier);
  });

  it("the order marks arrive in does not change what is kept", () => {
    const marks = [usage(NOW + 5_000), usage(NOW + 900_000), usage(NOW + 30_000), usage(NOW - 1)];
    const orders = [marks, [...marks].reverse(), [marks[2]!, marks[0]!, marks[3]!, marks[1]!]];
    for (const order of orders) {
      let held: SharedMark | undefined;
      for (const m of order) held = mergeMark(held, m, NOW);
      expect(held?.until).toBe(NOW + 900_000);
    }
  });

  it("a lapsed usage mark replaces nothing, and anything replaces it", () => {
    const lapsed = usage(NOW - 1);
    expect(mergeMark(undefined, lapsed, NOW)).toBeUndefined();
    const held = usage(NOW + 10_000);
    expect(mergeMark(held, lapsed, NOW)).toBe(held);
    // A deadline that has passed is no mark, however far it once reached.
    const next = usage(NOW + 1_000);
    expect(mergeMark(usage(NOW - 1), next, NOW)).toBe(next);
  });

  it("a refusal wins over a usage mark and is never replaced by one; a newer refusal's fingerprint wins", () => {
    const refused = invalid("fp-1");
    expect(mergeMark(usage(NOW + 600_000), refused, NOW)).toBe(refused);
    expect(mergeMark(refused, usage(NOW + 600_000), NOW)).toBe(refused);
    expect(mergeMark(refused, invalid("fp-1"), NOW)).toBe(refused);
    const rotated = invalid("fp-2");
    expect(mergeMark(refused, rotated, NOW)).toBe(rotated);
  });
});

describe("readMark", () => {
  it("takes a well-formed mark and nothing else", () => {
    expect(readMark({ state: "usage_limit_reached", until: NOW, reason: "429" })).toEqual({
      state: "usage_limit_reached",
      until: NOW,
      reason: "429",
    });
    expect(readMark({ state: "invalid", fingerprint: "abc", extra: 1 })).toEqual({
      state: "invalid",
      fingerprint: "abc",
    });
    for (const bad of [
      null,
      "x",
      [],
      {},
      { state: "ok" },
      { state: "usage_limit_reached" },
      { state: "usage_limit_reached", until: "soon" },
      { state: "usage_limit_reached", until: Number.POSITIVE_INFINITY },
      { state: "usage_limit_reached", until: -5 },
      { state: "invalid", reason: 7 },
      { state: "invalid", fingerprint: "x".repeat(10_000) },
    ])
      expect(readMark(bad), JSON.stringify(bad)).toBeUndefined();
  });
});

describe("two PoolStates on one home (two processes' view of pools.json)", () => {
  it("neither loses the other's mark, an earlier deadline never shortens a later one, and a reset reaches both", async () => {
    const home = mkdtempSync(join(tmpdir(), "kb-marks-"));
    const a = new PoolState(home);
    const b = new PoolState(home);
    const later = Date.now() + 900_000;
    a.markUsageLimit("p", "K1", later, "HTTP 429");
    await a.durable();
    // B never looked, and marks another credential (and K1, earlier): its write merges A's in.
    b.markUsageLimit("p", "K2", Date.now() + 60_000, "HTTP 429");
    b.markUsageLimit("p", "K1", Date.now() + 30_000, "HTTP 429");
    await b.durable();
    const c = new PoolState(home);
    expect(c.get("p", "K1").until).toBe(later);
    expect(c.get("p", "K2").state).toBe("usage_limit_reached");
    expect(b.get("p", "K1").until).toBe(later);
    // A reset made by B clears A's copy once A reads the file, and A's next write keeps it cleared.
    b.reset("p");
    b.flush();
    const follower = new HomeMarkStore(home);
    follower.attachPools(a);
    try {
      await new Promise<void>((resolve) => {
        const check = setInterval(() => {
          if (a.get("p", "K1").state === "ok") {
            clearInterval(check);
            resolve();
          }
        }, 10);
      });
    } finally {
      follower.close();
    }
    a.markUsageLimit("p", "K3", Date.now() + 60_000, "HTTP 429");
    await a.durable();
    const d = new PoolState(home);
    expect(d.get("p", "K1").state).toBe("ok");
    expect(d.get("p", "K3").state).toBe("usage_limit_reached");
  });
});
