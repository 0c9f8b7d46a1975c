// Refresh custody (docs/spec.md §8) against an authorization server whose refresh tokens rotate and
// are single-use, where a reused one revokes the whole grant: many requests over short-lived
// tokens, and two brokers on one home, must never send a refresh token twice; a revoked grant
// makes that login reauth_required while another login keeps serving.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ProxyAgent } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { FileTokenStore } from "../../state/tokens/home.js";
import { type BrokerProcess, findSecrets, startBroker, tempHome } from "../helpers/broker.js";
import {
  chatThroughBroker,
  type FakeOAuth,
  installFakeOAuth,
  oauthRules,
  serveChat,
  storedLogin,
} from "../helpers/fake-oauth.js";
import { type Fixture, startFixture } from "../helpers/fixture.js";
import { oauthLeaks } from "../helpers/oauth-leaks.js";

const open: { f: Fixture; fake: FakeOAuth; more: BrokerProcess[] }[] = [];
afterEach(async () => {
  for (const { f, fake, more } of open.splice(0)) {
    for (const b of more) await b.stop();
    await f.close();
    expect(oauthLeaks(f, fake.issued)).toEqual([]);
  }
});

async function setup(topLevel = "") {
  let fake!: FakeOAuth;
  const f = await startFixture({
    rules: (u) => {
      fake = installFakeOAuth(u);
      serveChat(u, fake);
      return oauthRules(u, `      token_timeout: 2s\n${topLevel}`);
    },
  });
  const more: BrokerProcess[] = [];
  open.push({ f, fake, more });
  const vars = JSON.parse((await f.cli(["env", "--format", "json"])).stdout) as Record<string, string>;
  const placeholder = vars.CODEX_OAUTH_ACCESS_TOKEN!;
  const store = new FileTokenStore(f.home);
  const addLogin = async (id: string) => {
    const t = fake.login();
    await store.put(storedLogin("codex-oauth", id, t));
    return t.grant;
  };
  const call = (agent: ProxyAgent) => chatThroughBroker(agent, placeholder);
  const served = async (agent: ProxyAgent) => {
    const deadline = Date.now() + 10_000;
    while ((await call(agent)).status !== 200 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
  };
  return { f, fake, more, addLogin, call, served };
}

/** Sends requests on `lanes` parallel lanes until `refreshes` refreshes have happened. */
async function load(
  fake: FakeOAuth,
  agents: ProxyAgent[],
  call: (a: ProxyAgent) => Promise<{ status: number }>,
  refreshes: number,
) {
  const statuses: number[] = [];
  const deadline = Date.now() + 60_000;
  await Promise.all(
    agents.flatMap((agent) =>
      [0, 1, 2].map(async () => {
        while (fake.refreshes < refreshes && Date.now() < deadline) statuses.push((await call(agent)).status);
      }),
    ),
  );
  return statuses;
}

// Each test drives several processes (broker, CLI): generous on a loaded machine.
const TEST_TIMEOUT = 90_000;

describe("refresh custody", () => {
  it(
    "short-lived access tokens over many requests: refreshed ahead, zero refresh-token reuse",
    async () => {
      const { f, fake, addLogin, call, served } = await setup();
      fake.accessTtl = 2;
      await addLogin("default");
      const agent = f.proxyAgent();
      await served(agent);
      const statuses = await load(fake, [agent], call, 4);
      expect(fake.refreshes).toBeGreaterThanOrEqual(4);
      expect(fake.reuses).toBe(0);
      expect(statuses.filter((s) => s !== 200)).toEqual([]);
      // The audit log is written in batches: wait for the line rather than read it once.
      const auditFile = join(f.home, "audit", "audit.jsonl");
      await expect
        .poll(() => (existsSync(auditFile) ? readFileSync(auditFile, "utf8") : ""), { timeout: 10_000 })
        .toContain('"decision":"refreshed"');
      await agent.close();
    },
    TEST_TIMEOUT,
  );

  it(
    "two brokers sharing one home under concurrent load: zero refresh-token reuse",
    async () => {
      const { f, fake, more, addLogin, call, served } = await setup();
      fake.accessTtl = 2;
      await addLogin("default");
      const second = await startBroker({ home: f.home, config: join(f.dir, "keybroker.yaml") });
      more.push(second);
      const { ProxyAgent } = await import("undici");
      const a = f.proxyAgent();
      const b = new ProxyAgent({ uri: second.url, requestTls: { ca: readFileSync(second.caPath, "utf8") } });
      await served(a);
      await served(b);
      const statuses = await load(fake, [a, b], call, 5);
      expect(fake.reuses).toBe(0);
      expect(statuses.filter((s) => s !== 200)).toEqual([]);
      await a.close();
      await b.close();
    },
    TEST_TIMEOUT,
  );

  it(
    "a revoked grant: that login becomes reauth_required, the other serves; with none left a fast 401 names the command",
    async () => {
      // notify: a script that appends each event (its stdin) to a file.
      const tell = tempHome();
      const events = join(tell, "events.jsonl");
      const script = join(tell, "tell.sh");
      writeFileSync(script, '#!/bin/sh\ncat >> "$1"\n', { mode: 0o700 });
      const { f, fake, addLogin, call, served } = await setup(`notify: "cmd:${script} ${events}"\n`);
      const told = async (n: number) => {
        const deadline = Date.now() + 10_000;
        const read = () => (existsSync(events) ? readFileSync(events, "utf8").trim().split("\n") : []);
        while (read().length < n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
        return read().map((l) => JSON.parse(l) as Record<string, unknown>);
      };
      const grantA = await addLogin("a-first");
      const grantB = await addLogin("b-second");
      const agent = f.proxyAgent();
      await served(agent);
      fake.revokeGrant(grantA);
      const r = await call(agent);
      expect(r.status).toBe(200);
      const status = JSON.parse((await f.cli(["status", "--json"])).stdout) as {
        providers: { id: string; credentials: { id: string; state: string }[] }[];
      };
      const states = Object.fromEntries(status.providers[0]!.credentials.map((c) => [c.id, c.state]));
      expect(states).toEqual({ "a-first": "reauth_required", "b-second": "ok" });
      // The tokens are kept, never wiped.
      expect((await new FileTokenStore(f.home).get("codex-oauth", "a-first"))?.refreshToken).toBeDefined();
      expect(await told(1)).toEqual([
        expect.objectContaining({
          event: "reauth_required",
          provider: "codex-oauth",
          credential: "a-first",
          hint: "keybroker auth add codex-oauth --label a-first",
        }),
      ]);

      fake.revokeGrant(grantB);
      const first = await call(agent);
      expect(first.status).toBe(401);
      const gone = await call(agent);
      expect(gone.status).toBe(401);
      expect(gone.headers["x-keybroker-error"]).toBe("reauth_required");
      expect(JSON.parse(gone.text).error.hint).toBe("keybroker auth add codex-oauth --label a-first");
      // Told once per login, however many requests then found it needing a person.
      expect((await told(2)).map((e) => [e.event, e.credential])).toEqual([
        ["reauth_required", "a-first"],
        ["reauth_required", "b-second"],
      ]);
      expect(findSecrets(fake.issued, [tell])).toEqual([]);
      expect(fake.reuses).toBe(0);
      await agent.close();
    },
    TEST_TIMEOUT,
  );

  it(
    "a broker killed with kill -9 while holding the refresh lock: the other takes the lock over and keeps serving, zero reuse",
    async () => {
      const { f, fake, more, call } = await setup();
      // The login's access token is refused upstream (valid for an hour by its expiry, so no
      // timer refreshes it): the first request through a broker refreshes it on the 401.
      const t = fake.login();
      const refused = "at-refused-upstream-0123456789abcdef0123";
      fake.issued.push(refused);
      const now = Date.now();
      await new FileTokenStore(f.home).put({
        provider: "codex-oauth",
        id: "default",
        accessToken: refused,
        refreshToken: t.refresh_token,
        expiresAt: now + 3_600_000,
        issuedAt: now,
        createdAt: now,
        generation: 1,
        state: "ok",
      });
      const second = await startBroker({ home: f.home, config: join(f.dir, "keybroker.yaml") });
      more.push(second);
      const { ProxyAgent } = await import("undici");
      const a = f.proxyAgent();
      const b = new ProxyAgent({ uri: second.url, requestTls: { ca: readFileSync(second.caPath, "utf8") } });

      // Broker A takes the lock and sends the refresh; the token endpoint stalls; A is killed.
      let release!: () => void;
      fake.stall = new Promise<void>((r) => {
        release = r;
      });
      const stalled = call(a).catch((err: Error) => err);
      while (fake.tokenRequests === 0) await new Promise((r) => setTimeout(r, 5));
      const lock = join(f.home, "tokens", "codex-oauth~default.refresh.lock");
      expect(readFileSync(join(f.home, "tokens", "codex-oauth~default.json"), "utf8")).toContain(
        '"refreshAttempts": 1',
      );
      f.broker.child.kill("SIGKILL");
      await new Promise((r) => f.broker.child.once("exit", r));
      expect((await import("node:fs")).existsSync(lock)).toBe(true);
      // The server must see A's connection close before the stall ends, or it would process A's
      // refresh after all (its exit can be seen before the socket's end on a busy machine).
      while (fake.stalledGone === 0) await new Promise((r) => setTimeout(r, 5));
      fake.stall = undefined;
      release();
      await stalled;

      // Broker B finds the lock of a dead holder, takes it over once it is stale, sends the
      // refresh token once more (it never reached the server's processing) and serves.
      const r = await call(b);
      expect(r.status, r.text).toBe(200);
      expect((await call(b)).status).toBe(200);
      expect(fake.reuses).toBe(0);
      expect(fake.refreshes).toBe(1);
      const stored = await new FileTokenStore(f.home).get("codex-oauth", "default");
      expect(stored?.state).toBe("ok");
      expect(stored?.refreshToken).not.toBe(t.refresh_token);
      expect(stored?.refreshAttempts).toBeUndefined();
      await a.close();
      await b.close();
    },
    TEST_TIMEOUT,
  );
});
