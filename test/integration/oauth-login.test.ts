// `keybroker auth add|remove` for OAuth providers (docs/spec.md §8), driven as a user would: read the
// printed URL and code, approve at the authorization server (the device grant), or act as the
// browser and follow the authorize redirect to the loopback callback (PKCE). The running broker
// then serves real requests with the login, without a restart.
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { Agent, request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { FileTokenStore } from "../../state/tokens/home.js";
import { freePort, startCli } from "../helpers/cli-session.js";
import {
  AUTH_HOST,
  callUntil,
  chatThroughBroker,
  type FakeOAuth,
  installFakeOAuth,
  oauthRules,
  serveChat,
} from "../helpers/fake-oauth.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { oauthLeaks } from "../helpers/oauth-leaks.js";

const open: { f: InProcessFixture; fake: FakeOAuth }[] = [];
afterEach(async () => {
  for (const { f, fake } of open.splice(0)) {
    await f.close();
    expect(oauthLeaks(f, fake.issued)).toEqual([]);
  }
});

/** `auth add codex-oauth` with PKCE, its callback on `port`, no browser. */
const pkceAdd = (port: number, ...more: string[]) => [
  "auth",
  "add",
  "codex-oauth",
  "--flow",
  "pkce",
  "--port",
  String(port),
  "--no-browser",
  ...more,
];

async function setup(oauthExtra = "") {
  let fake!: FakeOAuth;
  const f = await startInProcessFixture({
    rules: (u) => {
      fake = installFakeOAuth(u);
      serveChat(u, fake);
      return oauthRules(u, oauthExtra);
    },
  });
  open.push({ f, fake });
  const placeholder = f.placeholders().CODEX_OAUTH_ACCESS_TOKEN!;
  const agent = f.proxyAgent();
  const call = () => chatThroughBroker(agent, placeholder);
  const until = (status: number) => callUntil(call, status);
  return { f, fake, call, until, agent };
}

/** The test's browser: it reaches the fake authorization server at its own address. */
function browser(f: InProcessFixture): Agent {
  return new Agent({
    connect: {
      ca: readFileSync(f.upstream.caPath, "utf8"),
      lookup: (_host, _opts, cb) => cb(null, [{ address: "127.0.0.1", family: 4 }]),
    },
  });
}

async function follow(f: InProcessFixture, authorizeUrl: string): Promise<string> {
  const u = new URL(authorizeUrl);
  u.port = String(f.upstream.port);
  const res = await request(u, { dispatcher: browser(f), headers: { host: AUTH_HOST } });
  await res.body.dump();
  expect(res.statusCode).toBe(302);
  return String(res.headers.location);
}

// Each test drives several processes (broker, CLI): generous on a loaded machine.
const TEST_TIMEOUT = 90_000;

describe("auth add / remove", () => {
  it(
    "device grant: prints the URL and code, stores the login once approved; the broker serves it at once; remove revokes it",
    async () => {
      const { f, fake, call, until, agent } = await setup();
      expect((await call()).status).toBe(401);

      const add = startCli(f, ["auth", "add", "codex-oauth", "--label", "work"]);
      const url = await add.waitFor(/open: (\S+)/);
      const code = await add.waitFor(/enter the code: (\S+)/);
      expect(url[1]).toBe(`https://${AUTH_HOST}/activate?user_code=${code[1]}`);
      fake.approve(code[1]!);
      expect(await add.exit(), add.err()).toBe(0);
      expect(add.out()).toContain('codex-oauth: logged in as credential "work"');

      const served = await until(200);
      expect(served.status).toBe(200);

      const list = await f.cli(["auth", "list"]);
      expect(list.stdout).toMatch(/work {2}oauth sha256:[0-9a-f]{12} {2}ok {2}expires \d{4}-/);

      const removed = await f.cli(["auth", "remove", "codex-oauth", "--credential", "work"]);
      expect(removed.status, removed.stderr).toBe(0);
      expect(removed.stdout).toContain('removed login "work" and revoked it');
      expect(fake.issued.some((t) => t.startsWith("at-") && fake.valid(t))).toBe(false);
      const gone = await until(401);
      expect(gone.headers["x-keybroker-error"]).toBe("reauth_required");
      expect(JSON.parse(gone.text).error.hint).toBe("keybroker auth add codex-oauth");
      await agent.close();
      await f.broker.stop();
      const audit = readFileSync(join(f.home, "audit", "audit.jsonl"), "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { decision: string; credential?: string });
      expect(audit.filter((l) => l.credential === "work").map((l) => l.decision)).toEqual(
        expect.arrayContaining(["login", "injected", "removed"]),
      );
    },
    TEST_TIMEOUT,
  );

  it(
    "PKCE: completes the moment the right callback arrives, even when the token endpoint answers after the wait",
    async () => {
      const { f, fake, until, agent } = await setup();
      const port = await freePort();
      // The wait is 1 s; the token endpoint takes 1.5 s after the callback. The login must
      // still complete: no timeout may fire once the callback came.
      fake.tokenDelayMs = 1500;
      const add = startCli(f, pkceAdd(port, "--timeout", "1s"));
      const [, authorizeUrl] = await add.waitFor(/open: (\S+)/);
      const callback = await follow(f, authorizeUrl!);
      expect(callback.startsWith(`http://127.0.0.1:${port}/callback?`)).toBe(true);

      // A callback with another state is not this login: refused, and the login keeps waiting.
      const forged = new URL(callback);
      forged.searchParams.set("state", "not-the-state");
      expect((await request(forged)).statusCode).toBe(400);

      const res = await request(callback);
      expect(res.statusCode).toBe(200);
      expect(await res.body.text()).toContain("Logged in");
      expect(await add.exit(), add.err()).toBe(0);
      fake.tokenDelayMs = 0;
      expect((await until(200)).status).toBe(200);
      await agent.close();
    },
    TEST_TIMEOUT,
  );

  it(
    "PKCE: a callback with the right state but another issuer (or none) is refused and cannot cancel the login",
    async () => {
      const { f, until, agent } = await setup();
      const port = await freePort();
      const add = startCli(f, pkceAdd(port));
      const [, authorizeUrl] = await add.waitFor(/open: (\S+)/);
      const callback = await follow(f, authorizeUrl!);
      // A local process that learnt the state races the browser with a mix-up (RFC 9207).
      for (const iss of ["https://evil.example", undefined]) {
        const forged = new URL(callback);
        forged.searchParams.set("error", "access_denied");
        forged.searchParams.delete("code");
        if (iss === undefined) forged.searchParams.delete("iss");
        else forged.searchParams.set("iss", iss);
        const res = await request(forged);
        expect(res.statusCode).toBe(400);
        expect(await res.body.text()).toContain("not the login keybroker is waiting for");
      }
      await add.waitFor(/A callback was refused \(unexpected "iss"/);
      const res = await request(callback);
      expect(res.statusCode).toBe(200);
      await res.body.dump();
      expect(await add.exit(), add.err()).toBe(0);
      expect(add.out()).toContain('codex-oauth: logged in as credential "default"');
      expect((await until(200)).status).toBe(200);
      await agent.close();
    },
    TEST_TIMEOUT,
  );

  it(
    "PKCE: a port in use is a clear error naming --port, and nothing is stored",
    async () => {
      const { f } = await setup();
      const busy = createServer().listen(0, "127.0.0.1");
      await once(busy, "listening");
      const port = (busy.address() as { port: number }).port;
      const add = startCli(f, pkceAdd(port));
      expect(await add.exit()).toBe(1);
      expect(add.err()).toContain(`port ${port} is in use`);
      expect(add.err()).toContain("--port N");
      busy.close();
      const list = await f.cli(["auth", "list", "--json"]);
      expect(JSON.parse(list.stdout).providers[0].credentials).toEqual([]);
    },
    TEST_TIMEOUT,
  );

  it(
    "an oversized or a slow token endpoint is cut off, named, and nothing is stored",
    async () => {
      const { f, fake } = await setup("      token_timeout: 1s\n");
      /** A PKCE login whose browser comes back, then whose token answer fails: exit 1. */
      const failedPkceLogin = async (fx: typeof f) => {
        const cli = startCli(fx, pkceAdd(await freePort()));
        const [, url] = await cli.waitFor(/open: (\S+)/);
        await request(await follow(fx, url!)).then((r) => r.body.dump());
        expect(await cli.exit()).toBe(1);
        return cli;
      };
      fake.oversized = true;
      const big = await failedPkceLogin(f);
      expect(big.err()).toContain(`https://${AUTH_HOST}/token answered more than 1048576 bytes`);
      fake.oversized = false;
      fake.tokenDelayMs = 3000;
      const slow = await failedPkceLogin(f);
      expect(slow.err()).toContain(`https://${AUTH_HOST}/token did not answer within 1000 ms`);
      fake.tokenDelayMs = 0;
      expect(await new FileTokenStore(f.home).list()).toEqual([]);
    },
    TEST_TIMEOUT,
  );

  it(
    "device grant: access_denied stops with a clear message and stores nothing",
    async () => {
      const { f, fake } = await setup();
      fake.deny = true;
      const add = startCli(f, ["auth", "add", "codex-oauth"]);
      expect(await add.exit()).toBe(1);
      expect(add.err()).toContain("was denied at the authorization server; nothing was stored");
    },
    TEST_TIMEOUT,
  );

  it(
    "device grant: slow_down adds 5 s to the interval; expired_token stops with a clear message",
    async () => {
      const { f, fake } = await setup();
      fake.slowDowns = 1;
      const add = startCli(f, ["auth", "add", "codex-oauth", "--label", "slow"]);
      const [, code] = await add.waitFor(/enter the code: (\S+)/);
      fake.approve(code!);
      expect(await add.exit(), add.err()).toBe(0);
      // Polls: the first answered slow_down, the next came the interval (1 s) plus 5 s later.
      expect(fake.devicePolls.length).toBe(2);
      expect(fake.devicePolls[1]! - fake.devicePolls[0]!).toBeGreaterThanOrEqual(5_900);

      fake.expire = true;
      const expired = startCli(f, ["auth", "add", "codex-oauth", "--label", "late"]);
      expect(await expired.exit()).toBe(1);
      expect(expired.err()).toContain(
        "the code expired before the login to codex-oauth was approved; nothing was stored — run keybroker auth add codex-oauth again",
      );
      expect((await new FileTokenStore(f.home).list()).map((l) => l.id)).toEqual(["slow"]);
    },
    TEST_TIMEOUT,
  );

  it(
    "an https redirect_uri: the user pastes the address the browser was sent to",
    async () => {
      const { f } = await setup("      redirect_uri: https://app.example.com/kb/callback\n");
      const add = startCli(f, ["auth", "add", "codex-oauth", "--flow", "pkce", "--label", "pasted"]);
      const [, url] = await add.waitFor(/open: (\S+)/);
      await add.waitFor(/paste here the address/);
      const sentTo = await follow(f, url!);
      expect(sentTo.startsWith("https://app.example.com/kb/callback?code=")).toBe(true);
      add.child.stdin!.write("not an address\n");
      await add.waitFor(/That is not an address/);
      add.child.stdin!.end(`${sentTo}\n`);
      expect(await add.exit(), add.err()).toBe(0);
      expect(add.out()).toContain('logged in as credential "pasted"');
      expect((await new FileTokenStore(f.home).get("codex-oauth", "pasted"))?.refreshToken).toBeDefined();
    },
    TEST_TIMEOUT,
  );

  it(
    "a redirect_uri without a port means port 80, and that is the port listened on",
    async () => {
      const { f } = await setup("      redirect_uri: http://127.0.0.1/callback\n");
      // Port 80 taken here (as root), or not ours to take: either way the login names it and
      // stops, instead of listening on some other port the server would never send back to.
      const busy = createServer().listen(80, "127.0.0.1");
      const bound = await new Promise<boolean>((r) => {
        busy.once("listening", () => r(true));
        busy.once("error", () => r(false));
      });
      const add = startCli(f, ["auth", "add", "codex-oauth", "--flow", "pkce", "--no-browser"]);
      expect(await add.exit()).toBe(1);
      expect(add.err()).toMatch(bound ? /port 80 is in use/ : /port 80 needs privileges/);
      expect(add.err()).toContain("--port N");
      if (bound) busy.close();
    },
    TEST_TIMEOUT,
  );

  it(
    "with no broker running, auth add and auth remove still write their audit lines",
    async () => {
      const { f, fake, agent } = await setup();
      await agent.close();
      await f.broker.stop();
      const add = startCli(f, ["auth", "add", "codex-oauth", "--label", "offline"]);
      const [, code] = await add.waitFor(/enter the code: (\S+)/);
      fake.approve(code!);
      expect(await add.exit(), add.err()).toBe(0);
      expect((await f.cli(["auth", "remove", "codex-oauth", "--credential", "offline"])).status).toBe(0);
      for (const chain of ["audit", "security"]) {
        const lines = readFileSync(join(f.home, "audit", `${chain}.jsonl`), "utf8")
          .trim()
          .split("\n")
          .map((l) => JSON.parse(l) as { decision: string; credential?: string; fingerprint?: string });
        const mine = lines.filter((l) => l.credential === "offline");
        expect(mine.map((l) => l.decision)).toEqual(["login", "removed"]);
        expect(mine[0]!.fingerprint).toMatch(/^sha256:/);
      }
      const verify = await f.cli(["audit", "verify"]);
      expect(verify.status, verify.stdout + verify.stderr).toBe(0);
    },
    TEST_TIMEOUT,
  );
});
