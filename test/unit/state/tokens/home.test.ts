import { mkdtempSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { FileTokenStore } from "../../../../state/tokens/home.js";
import type { StoredLogin } from "../../../../state/tokens/login.js";
import { LockTimeoutError } from "../../../../state/tokens/store.js";

function login(over: Partial<StoredLogin> = {}): StoredLogin {
  return {
    provider: "acme-oauth",
    id: "default",
    accessToken: "at-1",
    refreshToken: "rt-1",
    issuedAt: 1,
    createdAt: 1,
    generation: 1,
    state: "ok",
    ...over,
  };
}

describe("the file token store", () => {
  it("writes private files atomically and reads them back", async () => {
    const home = mkdtempSync(join(tmpdir(), "kb-tokens-"));
    const store = new FileTokenStore(home);
    expect(await store.list()).toEqual([]);
    expect(await store.put(login())).toBe(true);
    expect(await store.get("acme-oauth", "default")).toEqual(login());
    expect(statSync(join(home, "tokens")).mode & 0o777).toBe(0o700);
    expect(statSync(join(home, "tokens", "acme-oauth~default.json")).mode & 0o777).toBe(0o600);
    // No temporary file is left behind.
    expect(readdirSync(join(home, "tokens"))).toEqual(["acme-oauth~default.json"]);
    expect(await store.remove("acme-oauth", "default")).toBe(true);
    expect(await store.remove("acme-oauth", "default")).toBe(false);
  });

  it("refuses a write fenced on a generation that is no longer stored", async () => {
    const store = new FileTokenStore(mkdtempSync(join(tmpdir(), "kb-tokens-")));
    await store.put(login());
    // Another process refreshed meanwhile: generation 2 with a newer token.
    await store.put(login({ accessToken: "at-2", generation: 2 }));
    // A stalled holder that read generation 1 must not overwrite it.
    expect(await store.put(login({ accessToken: "at-stale", generation: 2 }), 1)).toBe(false);
    expect((await store.get("acme-oauth", "default"))?.accessToken).toBe("at-2");
    expect(await store.put(login({ accessToken: "at-3", generation: 3 }), 2)).toBe(true);
  });

  it("serializes holders of the refresh lock and gives up after the wait", async () => {
    const store = new FileTokenStore(mkdtempSync(join(tmpdir(), "kb-tokens-")));
    const order: string[] = [];
    let releaseFirst!: () => void;
    const firstHolds = new Promise<void>((r) => {
      releaseFirst = r;
    });
    let firstIn!: () => void;
    const entered = new Promise<void>((r) => {
      firstIn = r;
    });
    const opts = { staleMs: 5000, waitMs: 5000 };
    const first = store.withRefreshLock("acme-oauth", "default", opts, async () => {
      order.push("first in");
      firstIn();
      await firstHolds;
      order.push("first out");
    });
    await entered;
    await expect(
      store.withRefreshLock("acme-oauth", "default", { staleMs: 5000, waitMs: 200 }, async () => {}),
    ).rejects.toBeInstanceOf(LockTimeoutError);
    const second = store.withRefreshLock("acme-oauth", "default", opts, async () => {
      order.push("second in");
    });
    releaseFirst();
    await Promise.all([first, second]);
    expect(order).toEqual(["first in", "first out", "second in"]);
  });
});
