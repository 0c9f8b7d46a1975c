// The cache in front of slow or failing sources, with a fetch the test controls.
import { describe, expect, it } from "vitest";
import { RefreshCache } from "../../../secrets/refresh-cache.js";

/** A fetch whose calls wait until the test answers them. */
function controlledFetch() {
  const calls: { key: string; resolve: (v: string) => void; reject: (e: Error) => void }[] = [];
  const fetch = (key: string) =>
    new Promise<string>((resolve, reject) => {
      calls.push({ key, resolve, reject });
    });
  return { calls, fetch };
}

/** Lets the cache see a fetch the test just answered. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

function setup(timeoutMs = 60_000) {
  let clock = 1_000_000;
  const events: string[] = [];
  const { calls, fetch } = controlledFetch();
  const cache = new RefreshCache(fetch, {
    ttlMs: 60_000,
    graceMs: 120_000,
    timeoutMs,
    now: () => clock,
    onStale: (key, why) => events.push(`stale ${key}: ${why}`),
    onExpired: (key, why) => events.push(`expired ${key}: ${why}`),
    onRecovered: (key) => events.push(`recovered ${key}`),
  });
  return {
    cache,
    calls,
    events,
    advance: (ms: number) => {
      clock += ms;
    },
  };
}

describe("RefreshCache", () => {
  it("fetches once for concurrent callers and serves memory within the TTL", async () => {
    const { cache, calls, advance } = setup();
    const a = cache.get("k");
    const b = cache.get("k");
    expect(calls).toHaveLength(1);
    calls[0]!.resolve("v1");
    expect(await a).toMatchObject({ kind: "value", data: "v1" });
    expect(await b).toMatchObject({ kind: "value", data: "v1" });
    advance(30_000);
    expect(await cache.get("k")).toMatchObject({ kind: "value", data: "v1" });
    expect(calls).toHaveLength(1);
  });

  it("refreshes in the background in the last quarter of the TTL", async () => {
    const { cache, calls, advance } = setup();
    const first = cache.get("k");
    calls[0]!.resolve("v1");
    expect(await first).toMatchObject({ expiresAt: 1_000_000 + 45_000 });
    advance(50_000);
    expect(await cache.get("k")).toMatchObject({ kind: "value", data: "v1", expiresAt: 1_000_000 + 60_000 });
    expect(calls).toHaveLength(2);
    calls[1]!.resolve("v2");
    await settle();
    advance(11_000);
    expect(await cache.get("k")).toMatchObject({ kind: "value", data: "v2" });
  });

  it("waits for a refresh of a value past its TTL, at most the timeout", async () => {
    const { cache, calls, events, advance } = setup(200);
    const first = cache.get("k");
    calls[0]!.resolve("v1");
    await first;
    advance(61_000);
    // The refresh never answers: after 200 ms (real time) the old value is served as stale.
    const stale = await cache.get("k");
    expect(stale).toMatchObject({
      kind: "value",
      data: "v1",
      stale: "no answer within 200 ms (still trying)",
    });
    expect(events).toEqual(["stale k: no answer within 200 ms (still trying)"]);
    // Still one fetch in flight, and nobody waits for it any more.
    expect(await cache.get("k")).toMatchObject({ stale: "no answer within 200 ms (still trying)" });
    expect(calls).toHaveLength(2);
    calls[1]!.resolve("v2");
    await settle();
    expect(await cache.get("k")).toMatchObject({ kind: "value", data: "v2" });
    expect(events.at(-1)).toBe("recovered k");
  });

  it("does not wait when the caller has nothing to gain", async () => {
    const { cache, calls, advance } = setup();
    const first = cache.get("k");
    calls[0]!.resolve("");
    await first;
    advance(61_000);
    expect(await cache.get("k", { waitFor: (previous) => previous !== "" })).toMatchObject({
      kind: "value",
      data: "",
      stale: "refreshing",
    });
    expect(calls).toHaveLength(2);
  });

  it("serves the last value once fetches fail, for the grace period, then fails closed", async () => {
    const { cache, calls, events, advance } = setup();
    const first = cache.get("k");
    calls[0]!.resolve("v1");
    await first;
    advance(61_000);
    const pending = cache.get("k");
    calls[1]!.reject(new Error("HTTP 503"));
    expect(await pending).toMatchObject({ kind: "value", data: "v1", stale: "HTTP 503" });
    // A source known to fail is asked again at most every 5 s, and never waited for.
    advance(1_000);
    expect(await cache.get("k")).toMatchObject({ kind: "value", data: "v1", stale: "HTTP 503" });
    expect(calls).toHaveLength(2);
    advance(5_000);
    expect(await cache.get("k")).toMatchObject({ kind: "value", data: "v1" });
    expect(calls).toHaveLength(3);
    calls[2]!.reject(new Error("HTTP 503 again"));
    await settle();
    advance(120_000);
    const closed = await cache.get("k");
    expect(closed).toMatchObject({ kind: "error" });
    expect(closed.kind === "error" ? closed.message : "").toBe(
      "HTTP 503 again; failing for 126 s, longer than the grace period: the last value is no longer used",
    );
    expect(events).toEqual(["stale k: HTTP 503", "expired k: HTTP 503 again"]);
  });

  it("counts the grace period from the first failure, however old the value", async () => {
    const { cache, calls, advance } = setup();
    const first = cache.get("k");
    calls[0]!.resolve("v1");
    await first;
    advance(3_600_000); // idle for an hour, then the source fails
    const pending = cache.get("k");
    calls[1]!.reject(new Error("HTTP 503"));
    expect(await pending).toMatchObject({ kind: "value", data: "v1", stale: "HTTP 503" });
    advance(119_000);
    expect(await cache.get("k")).toMatchObject({ kind: "value", data: "v1" });
    advance(1_000);
    expect(await cache.get("k")).toMatchObject({ kind: "error" });
  });

  it("answers an error when the first fetch fails", async () => {
    const { cache, calls } = setup();
    const pending = cache.get("k");
    calls[0]!.reject(new Error("cannot reach it"));
    expect(await pending).toMatchObject({ kind: "error", message: "cannot reach it" });
  });
});
