// The admin page's parts without a browser: escaping, sessions, the login limiter, the
// password hash and the usage buckets.
import { afterEach, describe, expect, it, vi } from "vitest";
import { html } from "../../../admin/html.js";
import { hashPassword, verifyPassword } from "../../../admin/password.js";
import { LINK_MS, LoginLimiter, limitKey, Sessions, sessionKey } from "../../../admin/sessions.js";
import { HOUR_MS, Usage } from "../../../admin/usage.js";
import { knownSecrets } from "../../../core/scrub.js";
import { MemorySessionStore } from "../../../state/sessions/memory.js";
import { IDLE_MS } from "../../../state/sessions/store.js";

afterEach(() => {
  vi.useRealTimers();
});

describe("html", () => {
  it("escapes every value and masks a known secret", () => {
    knownSecrets.add("sk-admin-unit-secret-0123456789abcdef");
    const out = html`<td title="${'"><script>x</script>'}">${"sk-admin-unit-secret-0123456789abcdef & <b>"}</td>`;
    expect(out.text).toBe(
      '<td title="&quot;&gt;&lt;script&gt;x&lt;/script&gt;">' +
        `${knownSecrets.scrub("sk-admin-unit-secret-0123456789abcdef")} &amp; &lt;b&gt;</td>`,
    );
    expect(out.text).not.toContain("sk-admin-unit-secret-0123456789abcdef");
    // Markup made with html passes as is; lists are joined.
    expect(html`<ul>${["a", "b"].map((x) => html`<li>${x}</li>`)}</ul>`.text).toBe(
      "<ul><li>a</li><li>b</li></ul>",
    );
  });
});

describe("sessions", () => {
  it("slide on use and end after 12 h idle, with no new values; the cookie alone finds nothing", async () => {
    vi.useFakeTimers();
    const store = new MemorySessionStore();
    const sessions = new Sessions(store);
    const { cookie, secret, session } = await sessions.create("owner", "password");
    expect(await store.get(cookie)).toBeUndefined(); // kept by hash, not by cookie value
    expect(session.key).toBe(sessionKey(cookie, secret));
    // Either half alone, or the halves swapped, is no session (decision 104).
    expect(await sessions.use(cookie, undefined)).toBeUndefined();
    expect(await sessions.use(cookie, "")).toBeUndefined();
    expect(await sessions.use(undefined, secret)).toBeUndefined();
    expect(await sessions.use(secret, cookie)).toBeUndefined();
    vi.advanceTimersByTime(IDLE_MS - 1000);
    expect((await sessions.use(cookie, secret))?.key).toBe(session.key);
    vi.advanceTimersByTime(IDLE_MS - 1000); // 24 h after login, 12 h after last use
    expect(await sessions.use(cookie, secret)).toBeDefined();
    // Polling does not slide it.
    vi.advanceTimersByTime(IDLE_MS - 1000);
    expect(await sessions.use(cookie, secret, false)).toBeDefined();
    vi.advanceTimersByTime(2000);
    expect(await sessions.use(cookie, secret)).toBeUndefined();
  });

  it("one-time links work once and expire", () => {
    vi.useFakeTimers();
    const sessions = new Sessions(new MemorySessionStore());
    const code = sessions.newLink();
    expect(sessions.spendLink(code)).toBe(true);
    expect(sessions.spendLink(code)).toBe(false);
    const late = sessions.newLink();
    vi.advanceTimersByTime(LINK_MS + 1);
    expect(sessions.spendLink(late)).toBe(false);
    expect(sessions.spendLink("made-up")).toBe(false);
  });

  it("counts a password check when it starts; a success takes back only its own", () => {
    vi.useFakeTimers();
    const limiter = new LoginLimiter(3, 60_000, 2);
    const one = limiter.begin("10.0.0.1");
    expect(one.ok).toBe(true);
    // One check at a time per address, two in all: the rest are refused at once.
    expect(limiter.begin("10.0.0.1")).toMatchObject({ ok: false, why: "busy" });
    const two = limiter.begin("10.0.0.2");
    expect(limiter.begin("10.0.0.3")).toMatchObject({ ok: false, why: "crowded" });
    expect(limiter.running).toBe(2);
    if (!one.ok || !two.ok) throw new Error("unreachable");
    one.done(false);
    two.done(true);
    two.done(false); // a second done changes nothing
    expect(limiter.running).toBe(0);
    // 10.0.0.1 has one failure counted; 10.0.0.2's success took back only its own count.
    const next = limiter.begin("10.0.0.2");
    expect(next.ok).toBe(true);
    if (next.ok) next.done(false);
  });

  it("locks an address out after max failures, for the window, whatever succeeds meanwhile", () => {
    vi.useFakeTimers();
    const limiter = new LoginLimiter(3, 60_000);
    for (let i = 0; i < 2; i++) {
      const t = limiter.begin("10.0.0.1");
      if (t.ok) t.done(false);
    }
    const ok = limiter.begin("10.0.0.1");
    if (ok.ok) ok.done(true); // the person's own success leaves the two failures counted
    const last = limiter.begin("10.0.0.1");
    if (last.ok) last.done(false);
    expect(limiter.begin("10.0.0.1")).toMatchObject({ ok: false, why: "locked", waitSeconds: 60 });
    expect(limiter.begin("10.0.0.2").ok).toBe(true);
    vi.advanceTimersByTime(60_001);
    expect(limiter.begin("10.0.0.1").ok).toBe(true);
  });
});

describe("password", () => {
  it("is a salted scrypt hash that verifies only the right password", async () => {
    const a = await hashPassword("correct horse battery staple");
    const b = await hashPassword("correct horse battery staple");
    expect(a).toMatch(/^scrypt\$32768\$8\$1\$[\w-]+\$[\w-]+$/);
    expect(a).not.toBe(b);
    expect(a).not.toContain("horse");
    expect(await verifyPassword("correct horse battery staple", a)).toBe(true);
    expect(await verifyPassword("correct horse battery stapler", a)).toBe(false);
    expect(await verifyPassword("x", "not a hash")).toBe(false);
  });
});

describe("usage", () => {
  it("counts per client and provider by the hour and forgets what is older than 24 h", () => {
    const u = new Usage();
    const t0 = 1_800_000_000_000;
    u.count("agent", "openai", 200, false, 100, t0);
    u.count("agent", "openai", 503, false, 10, t0 + HOUR_MS);
    u.count("agent", "openai", 403, true, 0, t0 + HOUR_MS);
    u.count("ci", undefined, 200, false, 5, t0);
    const rows = u.rows(t0 + HOUR_MS);
    expect(rows[0]).toMatchObject({
      client: "agent",
      provider: "openai",
      requests: 3,
      errors: 1,
      blocked: 1,
      bytes: 110,
    });
    expect(rows[0]!.hourly.slice(-2)).toEqual([1, 2]);
    expect(rows[1]).toMatchObject({ client: "ci", provider: "-", requests: 1 });
    // A day later the first hour is gone; after 25 h nothing is left.
    expect(u.rows(t0 + 24 * HOUR_MS)[0]).toMatchObject({ client: "agent", requests: 2 });
    expect(u.rows(t0 + 25 * HOUR_MS)).toEqual([]);
  });

  it("keeps one row per provider of a client, and counts a pair again after it was forgotten", () => {
    const u = new Usage();
    const t0 = 1_800_000_000_000;
    u.count("agent", "openai", 200, false, 1, t0);
    u.count("agent", "anthropic", 200, false, 2, t0);
    u.count("agent", "anthropic", 200, false, 2, t0);
    expect(u.rows(t0).map((r) => [r.client, r.provider, r.requests])).toEqual([
      ["agent", "anthropic", 2],
      ["agent", "openai", 1],
    ]);
    expect(u.rows(t0 + 25 * HOUR_MS)).toEqual([]);
    u.count("agent", "openai", 200, false, 1, t0 + 25 * HOUR_MS);
    expect(u.rows(t0 + 25 * HOUR_MS)).toMatchObject([{ client: "agent", provider: "openai", requests: 1 }]);
  });

  it("counts every loopback address as one, and IPv6 by its /64 (found in review)", () => {
    for (const a of ["127.0.0.1", "127.9.9.9", "127.255.0.3", "::1", "::ffff:127.0.0.2"])
      expect(limitKey(a)).toBe("loopback");
    expect(limitKey("10.0.0.1")).toBe("10.0.0.1");
    expect(limitKey("::ffff:10.0.0.1")).toBe("10.0.0.1");
    expect(limitKey("2001:db8::1")).toBe(limitKey("2001:db8:0:0:ffff::2"));
    expect(limitKey("2001:db8:0:1::1")).not.toBe(limitKey("2001:db8::1"));
    const limiter = new LoginLimiter(3, 60_000);
    for (const from of ["127.0.0.2", "127.0.0.3", "127.0.0.4"]) {
      const t = limiter.begin(from);
      if (t.ok) t.done(false);
    }
    expect(limiter.begin("127.0.0.5")).toMatchObject({ ok: false, why: "locked" });
  });
});
