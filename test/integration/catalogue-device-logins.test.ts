// docs/spec.md §6: the catalogue's subscription logins that use the device grant. With no provider in
// the rule file (it only leads the vendor's real host names to the fake and trusts its CA),
// `keybroker auth add qwen-oauth` / `nous-oauth` signs in as Qwen Code / hermes do (decisions
// 174, 175): the login is stored, the broker swaps the placeholder for the real token on the
// vendor's API host, and nothing the broker or the CLI wrote holds a token.
import { type ProxyAgent, request } from "undici";
import { afterEach, expect, it } from "vitest";
import { FileTokenStore } from "../../state/tokens/home.js";
import { startCli } from "../helpers/cli-session.js";
import {
  type DeviceVendor,
  deviceVendorRules,
  type FakeDeviceVendor,
  installDeviceVendor,
} from "../helpers/fake-device-vendors.js";
import { callUntil, chatThroughBroker } from "../helpers/fake-oauth.js";
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
    const r = await callUntil(call, 200);
    expect(r.status, r.text).toBe(200);
    // The backend saw the real token (it echoes it); the echo comes back as the placeholder.
    expect(fake.backend).toContain(200);
    expect(JSON.parse(r.text).echo).toBe(placeholder);

    // Qwen Code refreshing by itself under keybroker (its refresh token in the form body): answered
    // from custody with phantoms, and with the login's resource_url, without which Qwen Code
    // would turn to another API.
    const res = await request("https://chat.qwen.ai/api/v1/oauth2/token", {
      method: "POST",
      dispatcher: agent,
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "refresh_token",
        refresh_token: stored.refreshToken!,
        client_id: "f0304373b74a44d2b584a3fb70ca9e56",
      }).toString(),
    });
    const answer = (await res.body.json()) as Record<string, string>;
    expect(res.statusCode).toBe(200);
    expect(answer.refresh_token).toMatch(/kbph_/);
    expect(answer.resource_url).toBe("portal.qwen.ai");
    expect(fake.refreshes).toBe(0);
  },
  TEST_TIMEOUT,
);

it(
  "auth add qwen-oauth: a token answer naming an API host the provider does not list is stored, with a warning that names the host and what to do",
  async () => {
    const { f, fake } = await setup("qwen");
    fake.resourceUrl = "dashscope-intl.aliyuncs.com";
    const login = await signIn(f, fake, "qwen-oauth");
    expect(login.status, `${login.out}\n${login.err}`).toBe(0);
    expect(login.err).toContain(
      "warning: qwen-oauth: the server serves this login at https://dashscope-intl.aliyuncs.com, which is not one of the provider's hosts, and keybroker sends its token nowhere else: list that host in providers.qwen-oauth.hosts of a rule file to use it",
    );
    expect((await new FileTokenStore(f.home).get("qwen-oauth", "default"))?.apiBase).toBe(
      "dashscope-intl.aliyuncs.com",
    );
  },
  TEST_TIMEOUT,
);

it(
  "auth add nous-oauth: hermes' device grant at portal.nousresearch.com; a refresh sends the refresh token in x-nous-refresh-token; hermes' own refresh through keybroker is answered at home with phantoms",
  async () => {
    const { f, fake, agent } = await setup("nous");
    const login = await signIn(f, fake, "nous-oauth");
    expect(login.status, `${login.out}\n${login.err}`).toBe(0);
    expect(login.url).toMatch(/^https:\/\/portal\.nousresearch\.com\/device\/verify\?user_code=/);
    expect(login.out).toContain(
      "nous-oauth: the server serves this login at https://inference-api.nousresearch.com",
    );
    const store = new FileTokenStore(f.home);
    expect((await store.get("nous-oauth", "default"))?.apiBase).toBe(
      "https://inference-api.nousresearch.com/v1",
    );

    const placeholder = f.placeholders().NOUS_OAUTH_ACCESS_TOKEN!;
    const call = () =>
      chatThroughBroker(agent, placeholder, "https://inference-api.nousresearch.com/v1/chat/completions");
    expect((await callUntil(call, 200)).status).toBe(200);

    // The server stops taking the token: the 401 makes keybroker refresh once, with the refresh
    // token in the header Nous Portal reads it from, and the request is served again.
    fake.refuseAccess();
    const again = await call();
    expect(again.status, again.text).toBe(200);
    expect(fake.refreshes).toBe(1);
    expect(fake.bodyRefreshes).toBe(0);

    // hermes refreshing by itself under keybroker, with the real refresh token it signed in with
    // before: answered from custody (not forwarded), with phantoms and the login's API.
    const real = (await store.get("nous-oauth", "default"))!;
    const refresh = async (token: string) => {
      const res = await request("https://portal.nousresearch.com/api/oauth/token", {
        method: "POST",
        dispatcher: agent,
        headers: { "content-type": "application/x-www-form-urlencoded", "x-nous-refresh-token": token },
        body: "grant_type=refresh_token&client_id=hermes-cli",
      });
      return { status: res.statusCode, json: (await res.body.json()) as Record<string, string> };
    };
    const first = await refresh(real.refreshToken!);
    expect(first.status).toBe(200);
    expect(first.json.refresh_token).toMatch(/kbph_/);
    expect(first.json.access_token).toMatch(/^eyJrYmwiOi/);
    expect(first.json.inference_base_url).toBe("https://inference-api.nousresearch.com/v1");
    // Its next refresh carries the phantom, in the header: answered at home too.
    const second = await refresh(first.json.refresh_token!);
    expect(second.status).toBe(200);
    expect(fake.refreshes).toBe(1);
    // The phantom access token works on the API host like the placeholder.
    const viaPhantom = await chatThroughBroker(
      agent,
      second.json.access_token!,
      "https://inference-api.nousresearch.com/v1/chat/completions",
    );
    expect(viaPhantom.status, viaPhantom.text).toBe(200);
  },
  TEST_TIMEOUT,
);
