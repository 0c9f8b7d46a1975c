// docs/spec.md §6: the catalogue's subscription logins that use the device grant. With no provider in
// the rule file (it only leads the vendor's real host names to the fake and trusts its CA),
// `keybroker auth add qwen-oauth` / `nous-oauth` signs in as Qwen Code / hermes do (decisions
// 174, 175): the login is stored, the broker swaps the placeholder for the real token on the
// vendor's API host, and nothing the broker or the CLI wrote holds a token.
import type { ProxyAgent } from "undici";
import { afterEach, expect, it } from "vitest";
import { FileTokenStore } from "../../state/tokens/home.js";
import { startCli } from "../helpers/cli-session.js";
import {
  type DeviceVendor,
  deviceVendorRules,
  type FakeDeviceVendor,
  installDeviceVendor,
} from "../helpers/fake-device-vendors.js";
import { chatThroughBroker } from "../helpers/fake-oauth.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { oauthLeaks } from "../helpers/oauth-leaks.js";

const open: { f: InProcessFixture; fake: FakeDeviceVendor; agent: ProxyAgent }[] = [];
afterEach(async () => {
  for (const { f, fake, agent } of open.splice(0)) {
    await agent.close();
    await f.close();
    expect(oauthLeaks(f, fake.issued)).toEqual([]);
    expect(fake.phantomsSeen).toBe(0);
    expect(fake.reuses).toBe(0);
  }
});

async function setup(vendor: DeviceVendor) {
  let fake!: FakeDeviceVendor;
  const f = await startInProcessFixture({
    rules: (u) => {
      fake = installDeviceVendor(u, vendor);
      return deviceVendorRules(u, vendor);
    },
  });
  const agent = f.proxyAgent();
  open.push({ f, fake, agent });
  return { f, fake, agent };
}

/** `auth add <provider>` with no rule for it: approved at the fake once the code is printed. */
async function signIn(f: InProcessFixture, fake: FakeDeviceVendor, provider: string) {
  const add = startCli(f, ["auth", "add", provider]);
  const [, url] = await add.waitFor(/open: (\S+)/);
  const [, code] = await add.waitFor(/enter the code: (\S+)/);
  fake.approve(code!);
  const status = await add.exit();
  return { url: url!, status, out: add.out(), err: add.err() };
}

/** The broker learns of a new login from a file watch: call until it serves. */
async function until(call: () => ReturnType<typeof chatThroughBroker>, status: number) {
  const deadline = Date.now() + 10_000;
  let r = await call();
  while (r.status !== status && Date.now() < deadline) {
    await new Promise((x) => setTimeout(x, 50));
    r = await call();
  }
  return r;
}

const TEST_TIMEOUT = 90_000;

it(
  "auth add qwen-oauth: Qwen Code's device grant with PKCE at chat.qwen.ai; the login's API is the answer's resource_url; the placeholder reaches portal.qwen.ai as the real token",
  async () => {
    const { f, fake, agent } = await setup("qwen");
    const login = await signIn(f, fake, "qwen-oauth");
    expect(login.status, `${login.out}\n${login.err}`).toBe(0);
    expect(login.url).toMatch(/^https:\/\/chat\.qwen\.ai\/authorize\?user_code=/);
    expect(login.out).toContain('qwen-oauth: logged in as credential "default"');
    expect(login.out).toContain("qwen-oauth: the server serves this login at https://portal.qwen.ai");
    // The poll proved the challenge the start carried.
    expect(fake.badVerifiers).toBe(0);
    const stored = (await new FileTokenStore(f.home).get("qwen-oauth", "default"))!;
    expect(fake.issued).toContain(stored.accessToken);
    expect(stored.apiBase).toBe("portal.qwen.ai");
    const start = f.upstream.received.find((r) => r.url === "/api/v1/oauth2/device/code")!;
    expect(new URLSearchParams(start.body.toString()).get("code_challenge_method")).toBe("S256");

    const placeholder = f.placeholders().QWEN_OAUTH_ACCESS_TOKEN!;
    expect(placeholder).toBeDefined();
    const call = () => chatThroughBroker(agent, placeholder, "https://portal.qwen.ai/v1/chat/completions");
    const r = await until(call, 200);
    expect(r.status, r.text).toBe(200);
    // The backend saw the real token (it echoes it); the echo comes back as the placeholder.
    expect(fake.backend).toContain(200);
    expect(JSON.parse(r.text).echo).toBe(placeholder);
  },
  TEST_TIMEOUT,
);
