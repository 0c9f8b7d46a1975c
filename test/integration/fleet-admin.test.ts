// The admin page in fleet mode (docs/spec.md §16, §17): two brokers on one real redis-server with a
// password, sharing the CA and home key as a fleet does. A session started on one broker is
// accepted by the other with its CSRF token, and a logout on either ends it on both; Redis holds
// no cookie, token, password or CSRF token. In a real Chromium, the overview names the shared
// state, says `degraded since …` while Redis is frozen (the signed-in person keeps working from
// the broker's memory) and stops saying it once Redis answers again.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import type { Redis } from "ioredis";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminTokenPath } from "../../admin/api.js";
import { sessionKey } from "../../admin/sessions.js";
import {
  type AdminAnswer,
  type AdminSession,
  adminRequest,
  csrfOf,
  launchChromium,
  sessionOf,
} from "../helpers/admin-http.js";
import {
  type BrokerProcess,
  CLI,
  findSecrets,
  startBroker,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { fleetHomes, type RedisServer, redisLeaks, startRedis } from "../helpers/redis.js";

const REDIS_PASSWORD = "redis-pw-8c2e6a4f1d3b";
const PASSWORD = "fleet admin password 7f3a9c";
const BOSS_TOKEN = "boss-token-2b7e5d9c1a3f4680";
const KEY_A = "sk-fleet-admin-key-a-4e5f6a7b8c9d0e1f";
const PREFIX = "kbfa:";

let redis: RedisServer;
let raw: Redis;
let browser: Browser;
const homes: string[] = [];
const brokers: BrokerProcess[] = [];
/** Everything the admin pages answered, for the secret scan. */
const pages: string[] = [];

/** One request to a broker's admin page with the session (cookie and page secret). */
function adminPage(
  i: number,
  path: string,
  cookie?: AdminSession,
  form?: Record<string, string>,
): Promise<AdminAnswer> {
  return adminRequest(brokers[i]!.port, path, cookie, form, pages);
}

/** Every secret of the test: the passwords, the client token, the key, both homes' admin tokens. */
function secrets(): string[] {
  const adminTokens = homes.map((h) => readFileSync(adminTokenPath(h), "utf8").trim());
  return [PASSWORD, BOSS_TOKEN, KEY_A, REDIS_PASSWORD, ...adminTokens];
}

beforeAll(async () => {
  redis = await startRedis({ password: REDIS_PASSWORD });
  raw = redis.client();
  const config = writeConfig(
    tempHome(),
    `version: 1
state: { url: "${redis.url}", password: env:KB_REDIS_PASSWORD, prefix: "${PREFIX}" }
catalogue: false
providers:
  pooled:
    hosts: [api.pool.test]
    inject: { header: authorization }
    credentials: [KEY_A]
clients:
  boss: { token: BOSS_TOKEN, role: owner }
`,
  );
  // One CA and home key for the fleet, copied to the second home (README: Running a fleet).
  homes.push(...fleetHomes(2));
  // The password is set on the first broker's home only (read at each login), while both start.
  const setPassword = spawn(process.execPath, [CLI, "admin", "password", "--home", homes[0]!], {
    stdio: ["pipe", "ignore", "inherit"],
  });
  setPassword.stdin.end(`${PASSWORD}\n`);
  const env = { KEY_A, BOSS_TOKEN, KB_REDIS_PASSWORD: REDIS_PASSWORD };
  const [[code]] = await Promise.all([
    once(setPassword, "close"),
    ...homes.map(async (home) => brokers.push(await startBroker({ home, config, env }))),
  ]);
  expect(code).toBe(0);
  brokers.sort((a, b) => homes.indexOf(a.home) - homes.indexOf(b.home));
  browser = await launchChromium();
}, 60_000);

afterAll(async () => {
  await browser?.close();
  if (redis?.pid !== undefined) process.kill(redis.pid, "SIGCONT");
  for (const b of brokers) await b.stop();
  raw?.disconnect();
  await redis?.stop();
  // Nothing a broker printed or a page answered holds a secret.
  expect(findSecrets(secrets(), [], [...pages, ...brokers.flatMap((b) => [b.stdout(), b.stderr()])])).toEqual(
    [],
  );
});

describe("admin sessions shared on Redis", () => {
  it("a session started on broker 1 works on broker 2 with its CSRF token; a logout on broker 2 ends it on broker 1", async () => {
    const login = await adminPage(0, "/admin/login", undefined, { secret: PASSWORD });
    expect(login.status, login.text).toBe(200);
    const cookie = sessionOf(login);
    expect(cookie).toBeDefined();

    const one = await adminPage(0, "/admin/", cookie);
    expect(one.status).toBe(200);
    const csrf = csrfOf(one.text)!;
    // Broker 2 knows the session: the same page, the same form token.
    const two = await adminPage(1, "/admin/", cookie);
    expect(two.status).toBe(200);
    expect(csrfOf(two.text)).toBe(csrf);
    expect(two.text).toContain(
      `redis <code class="wrap">${redis.url}</code> · prefix <code>${PREFIX}</code>`,
    );

    // The form token is checked against the shared session: a wrong one is refused on broker 2.
    const forged = await adminPage(1, "/admin/do/reset", cookie, {
      provider: "pooled",
      csrf: "x".repeat(32),
    });
    expect(forged.status).toBe(403);
    const reset = await adminPage(1, "/admin/do/reset", cookie, { provider: "pooled", csrf });
    expect(reset).toMatchObject({ status: 303, location: "/admin/" });
    // The outcome's message went into the shared session: broker 1 shows it.
    expect((await adminPage(0, "/admin/", cookie)).text).toContain("pooled: no marks to clear.");

    // The session's Redis key is the hash of cookie and page secret, and expires after the idle
    // time, sliding on use.
    const key = `${PREFIX}session:${sessionKey(cookie!.cookie, cookie!.secret)}`;
    await raw.pexpire(key, 60_000);
    expect((await adminPage(1, "/admin/approvals", cookie)).status).toBe(200);
    expect(await raw.pttl(key)).toBeGreaterThan(11 * 3600_000);

    // Nothing in Redis is usable: no cookie, no CSRF token, no password, token or key.
    expect(await redisLeaks(raw, [cookie!.cookie, cookie!.secret, csrf, ...secrets()])).toEqual([]);

    const out = await adminPage(1, "/admin/logout", cookie, { csrf });
    expect(out).toMatchObject({ status: 303, location: "/admin/login" });
    expect(await adminPage(0, "/admin/", cookie)).toMatchObject({ status: 401 });
    expect(await raw.exists(key)).toBe(0);
  });

  it("the overview says degraded since … while Redis is frozen, the person stays logged in, and it clears on recovery", {
    timeout: 40_000,
  }, async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    page.setDefaultTimeout(10_000);
    let lateCookie: AdminSession | undefined;
    page.on("response", (res) => {
      if (res.status() < 300 || res.status() >= 400)
        void res.text().then(
          (t) => pages.push(t),
          () => {},
        );
    });
    const base = `http://127.0.0.1:${brokers[0]!.port}`;
    await page.goto(`${base}/admin/login`);
    await page.getByLabel("Password or admin token").fill(BOSS_TOKEN);
    await page.getByRole("button", { name: "Log in" }).click();
    await page.waitForURL(/\/admin\/$/);
    const fact = page.locator("#shared-state");
    await expect(fact.textContent()).resolves.toMatch(
      /redis\s+redis:\/\/127\.0\.0\.1:\d+\/0 · prefix kbfa:\s+ok/,
    );

    process.kill(redis.pid!, "SIGSTOP");
    try {
      await fact.getByText(/degraded since \d\d:\d\d:\d\d UTC/).waitFor();
      await expect(fact.textContent()).resolves.toMatch(/serving from memory/);
      // A page view while Redis is away: the session is served from this broker's copy.
      await page.reload();
      await expect(page.locator("h1").textContent()).resolves.toBe("Overview");
      await expect(fact.textContent()).resolves.toMatch(/degraded since/);
      // A login while Redis is away works on this broker, and reaches the fleet once Redis is back.
      const login = await adminPage(0, "/admin/login", undefined, { secret: PASSWORD });
      expect(login.status).toBe(200);
      lateCookie = sessionOf(login);
      expect((await adminPage(0, "/admin/", lateCookie)).status).toBe(200);
    } finally {
      process.kill(redis.pid!, "SIGCONT");
    }
    await fact.locator(".badge.ok").waitFor({ timeout: 15_000 });
    expect(await fact.textContent()).not.toMatch(/degraded/);
    // Still logged in, on both brokers (the session went to Redis again once it answered).
    await page.reload();
    await expect(page.locator("h1").textContent()).resolves.toBe("Overview");
    const cookie = {
      cookie: (await context.cookies()).find((c) => c.name === `kb_admin_${brokers[0]!.port}`)!.value,
      secret: (await page.evaluate('localStorage.getItem("kb_admin")')) as string,
    };
    const again = await adminPage(1, "/admin/", cookie);
    expect(again.status).toBe(200);
    expect((await adminPage(1, "/admin/", lateCookie)).status).toBe(200);
    // The session begun with the owner's token, written again after the outage: still nothing usable.
    expect(await raw.exists(`${PREFIX}session:${sessionKey(cookie.cookie, cookie.secret)}`)).toBe(1);
    expect(await redisLeaks(raw, [cookie.cookie, cookie.secret, csrfOf(again.text)!, ...secrets()])).toEqual(
      [],
    );
    await context.close();
  });
});
