// The memory implementations of the stores (state/*/memory.ts): the same promises as the home's
// and the fleet's stores, kept in one process.
import { describe, expect, it } from "vitest";
import { PoolState } from "../../../secrets/pool.js";
import { MemoryApprovalStore } from "../../../state/approvals/memory.js";
import type { Answer, HeldRequest } from "../../../state/approvals/store.js";
import { MarkRoom, MemoryMarkStore } from "../../../state/marks/memory.js";
import { MemoryMcpStore } from "../../../state/mcp/memory.js";
import type { McpBinding } from "../../../state/mcp/store.js";
import { MemorySessionStore } from "../../../state/sessions/memory.js";
import { IDLE_MS } from "../../../state/sessions/store.js";
import { newLogin } from "../../../state/tokens/login.js";
import { MemoryTokenStore } from "../../../state/tokens/memory.js";
import { LockTimeoutError } from "../../../state/tokens/store.js";
import { tempHome } from "../../helpers/broker.js";

describe("MemoryTokenStore", () => {
  it("lists, reads, fences a write on the generation, removes, and tells watchers", async () => {
    const store = new MemoryTokenStore();
    const seen: string[] = [];
    const stop = store.watch((provider, id) => seen.push(`${provider}/${id}`));
    const login = newLogin("gh", "default", { accessToken: "at-1" });
    expect(await store.put(login)).toBe(true);
    expect(await store.put(newLogin("ai", "work", { accessToken: "at-2" }))).toBe(true);
    expect((await store.list()).map((l) => `${l.provider}/${l.id}`)).toEqual(["ai/work", "gh/default"]);
    expect((await store.list("gh")).map((l) => l.id)).toEqual(["default"]);
    // A refresh that started from generation 1 writes; a stalled one still holding 1 does not.
    const refreshed = { ...login, accessToken: "at-3", generation: 2 };
    expect(await store.put(refreshed, 1)).toBe(true);
    expect(await store.put({ ...login, accessToken: "stale", generation: 2 }, 1)).toBe(false);
    expect((await store.get("gh", "default"))?.accessToken).toBe("at-3");
    expect(await store.remove("gh", "default")).toBe(true);
    expect(await store.remove("gh", "default")).toBe(false);
    stop();
    await store.put(login);
    expect(seen).toEqual(["gh/default", "ai/work", "gh/default", "gh/default"]);
  });

  it("lets one holder at a time refresh a login, and gives up after waitMs", async () => {
    const store = new MemoryTokenStore();
    const order: string[] = [];
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const first = store.withRefreshLock("gh", "default", { staleMs: 2000, waitMs: 5000 }, async () => {
      order.push("first in");
      await held;
      order.push("first out");
    });
    await expect(
      store.withRefreshLock("gh", "default", { staleMs: 2000, waitMs: 0 }, async () => "never"),
    ).rejects.toBeInstanceOf(LockTimeoutError);
    // Another login's lock is its own.
    expect(await store.withRefreshLock("gh", "other", { staleMs: 2000, waitMs: 0 }, async () => "free")).toBe(
      "free",
    );
    const second = store.withRefreshLock("gh", "default", { staleMs: 2000, waitMs: 5000 }, async () => {
      order.push("second in");
    });
    release();
    await Promise.all([first, second]);
    expect(order).toEqual(["first in", "first out", "second in"]);
  });
});

describe("MemoryMcpStore", () => {
  it("keeps registrations by issuer and bindings by login, handing out copies", async () => {
    const store = new MemoryMcpStore();
    const binding: McpBinding = {
      provider: "docs",
      id: "default",
      resource: "https://mcp.example/",
      server: {
        issuer: "https://as.example",
        authorization_endpoint: "https://as.example/a",
        token_endpoint: "https://as.example/t",
      },
      clientId: "c1",
      authMethod: "none",
      clientSource: "registered",
    };
    await store.putBinding(binding);
    const read = await store.binding("docs", "default");
    expect(read).toEqual(binding);
    expect(read).not.toBe(binding);
    expect(await store.binding("docs", "other")).toBeUndefined();
    await store.putRegistration({
      issuer: "https://as.example",
      clientId: "c1",
      authMethod: "none",
      redirectUris: ["http://127.0.0.1/cb"],
      registeredAt: 1,
    });
    expect((await store.registration("https://as.example"))?.clientId).toBe("c1");
    expect(await store.registration("https://other.example")).toBeUndefined();
    await store.removeBinding("docs", "default");
    expect(await store.binding("docs", "default")).toBeUndefined();
  });
});

describe("MemoryMarkStore", () => {
  it("gives a broker that joins later the marks made before, and takes its own to the others", () => {
    const room = new MarkRoom();
    const a = new PoolState(tempHome());
    new MemoryMarkStore(room).attachPools(a);
    const until = Date.now() + 60_000;
    a.markUsageLimit("p", "K1", until, "HTTP 429");
    const b = new PoolState(tempHome());
    b.markInvalid("p", "K2", "HTTP 401", "fp");
    new MemoryMarkStore(room).attachPools(b);
    expect(b.get("p", "K1").until).toBe(until);
    expect(a.get("p", "K2").state).toBe("invalid");
    // A store of another room shares nothing with these.
    const c = new PoolState(tempHome());
    new MemoryMarkStore().attachPools(c);
    expect(c.get("p", "K1").state).toBe("ok");
    a.markUsageLimit("p", "K3", until, "HTTP 429");
    expect(b.get("p", "K3").state).toBe("usage_limit_reached");
    expect(c.get("p", "K3").state).toBe("ok");
  });
});

describe("MemoryApprovalStore", () => {
  const held: HeldRequest = {
    id: "0a1b2c3d",
    client: "agent",
    provider: "gh",
    method: "PUT",
    host: "api.github.com",
    path: "/x",
    rule: "r1",
    heldAt: 1,
    expiresAt: 2,
    preview: "",
  };

  it("gives a request to exactly one taker, keeps grants extend-only, and publishes answers", async () => {
    const store = new MemoryApprovalStore();
    const answers: Answer[] = [];
    store.subscribe((a) => answers.push(a));
    await store.add(held);
    expect(await store.list()).toEqual([held]);
    expect(await store.take(held.id)).toEqual(held);
    expect(await store.take(held.id)).toBeUndefined();
    expect(await store.list()).toEqual([]);
    await store.grant("k", 5_000);
    await store.grant("k", 3_000);
    expect(await store.grantedUntil("k", 1_000)).toBe(5_000);
    expect(await store.grantedUntil("k", 5_000)).toBeUndefined();
    await store.publish({ held, outcome: "denied", by: "admin token" });
    expect(answers.map((a) => a.outcome)).toEqual(["denied"]);
  });
});

describe("MemorySessionStore", () => {
  it("drops idle sessions once it holds many, and keeps live ones", async () => {
    const store = new MemorySessionStore();
    const now = Date.now();
    const at = (key: string, lastSeen: number) => ({
      key,
      role: "admin" as const,
      via: "link",
      csrf: "c",
      createdAt: lastSeen,
      lastSeen,
    });
    await store.put(at("idle", now - IDLE_MS - 1));
    for (let i = 0; i < 64; i++) await store.put(at(`live-${i}`, now));
    expect(await store.get("idle")).toBeUndefined();
    expect(await store.get("live-0")).toBeDefined();
    expect(await store.get("live-63")).toBeDefined();
  });
});
