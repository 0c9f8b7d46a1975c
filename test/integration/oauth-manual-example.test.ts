// The manual's OAuth provider, verbatim (read out of docs/oauth.md, where the README sends a
// reader for OAuth, so the example stays true): a
// provider with nothing but its hosts and its `oauth:` block (docs/spec.md §8). Before any login,
// `start` runs (it used to die with an internal error right after its listening line),
// `check`, `env` and `status` work, and a request gets 401 reauth_required naming the
// `auth add` to run; after a device login the same placeholder is served.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, expect, it } from "vitest";
import { ROOT } from "../helpers/broker.js";
import { startCli } from "../helpers/cli-session.js";
import {
  AUTH_HOST,
  chatThroughBroker,
  type FakeOAuth,
  installFakeOAuth,
  serveChat,
  upstreamRules,
} from "../helpers/fake-oauth.js";
import { type Fixture, startFixture } from "../helpers/fixture.js";
import { oauthLeaks } from "../helpers/oauth-leaks.js";

/** The first yaml block of the manual's OAuth page. */
function manualExample(): string {
  const page = readFileSync(join(ROOT, "docs", "oauth.md"), "utf8");
  const block = /```yaml\n([\s\S]*?)```/.exec(page)?.[1];
  if (block === undefined) throw new Error("docs/oauth.md: no yaml block");
  return block;
}

const open: { f: Fixture; fake: FakeOAuth }[] = [];
afterEach(async () => {
  for (const { f, fake } of open.splice(0)) {
    await f.close();
    expect(oauthLeaks(f, fake.issued)).toEqual([]);
  }
});

it("the manual's OAuth provider (docs/oauth.md): start, check, env, status before any login, 401 reauth_required, then a login", async () => {
  const example = manualExample();
  expect(example).toContain("codex-oauth:\n    hosts: [chatgpt.com]\n    oauth:\n");
  expect(example).not.toMatch(/^\s*credentials:/m);
  const clientId = /client_id: (\S+)/.exec(example)![1]!;
  let fake!: FakeOAuth;
  const f = await startFixture({
    rules: (u) => {
      fake = installFakeOAuth(u, { clientId });
      serveChat(u, fake);
      // Only what the example cannot carry: its hosts resolved to the fakes, their CA trusted.
      return `${upstreamRules(u, ["chatgpt.com", AUTH_HOST])}${example}`;
    },
  });
  open.push({ f, fake });

  const check = await f.cli(["check"]);
  expect(check.stdout).toContain(
    "codex-oauth: inactive — it authenticates only with OAuth logins and has none yet (keybroker auth add codex-oauth)",
  );
  expect(check.stderr).not.toContain("problem:");
  expect(check.status, check.stdout + check.stderr).toBe(0);

  const env = await f.cli(["env", "--format", "json"]);
  expect(env.status, env.stderr).toBe(0);
  const placeholder = (JSON.parse(env.stdout) as Record<string, string>).CODEX_OAUTH_ACCESS_TOKEN;
  expect(placeholder).toMatch(/^kb-/);

  const status = await f.cli(["status"]);
  expect(status.status, status.stderr).toBe(0);
  expect(status.stdout).toMatch(/codex-oauth +active +chatgpt\.com/);

  const agent = f.proxyAgent();
  const url = "https://chatgpt.com/v1/chat/completions";
  const before = await chatThroughBroker(agent, placeholder!, url);
  expect(before.status).toBe(401);
  expect(before.headers["x-keybroker-error"]).toBe("reauth_required");
  expect(JSON.parse(before.text).error.hint).toBe("keybroker auth add codex-oauth");

  // The endpoints come from the issuer's metadata, as the example says.
  const add = startCli(f, ["auth", "add", "codex-oauth"]);
  const [, code] = await add.waitFor(/enter the code: (\S+)/);
  fake.approve(code!);
  expect(await add.exit(), add.err()).toBe(0);
  let after = await chatThroughBroker(agent, placeholder!, url);
  // The broker learns of the login from a file watch.
  for (let i = 0; i < 200 && after.status !== 200; i++) {
    await new Promise((r) => setTimeout(r, 50));
    after = await chatThroughBroker(agent, placeholder!, url);
  }
  expect(after.status).toBe(200);
  await agent.close();

  await f.broker.stop();
  expect(f.broker.stderr()).not.toContain("internal error");
  expect(f.broker.stderr()).toContain(
    "provider has no OAuth login yet: its requests get 401 reauth_required until keybroker auth add codex-oauth",
  );
  // It got as far as its signal handlers: a clean stop.
  expect(f.broker.stdout()).toContain("keybroker stopped (SIGTERM)");
}, 90_000);
