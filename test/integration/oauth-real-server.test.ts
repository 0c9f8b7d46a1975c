// OAuth custody against a real authorization server, oidc-provider, on loopback TLS: endpoints
// discovered from the issuer, `keybroker auth add` driven as a user would (the device grant:
// open the printed URL and approve on the server's own pages; PKCE: follow the authorize
// redirect back to the loopback callback), then real clients (curl, the openai SDK) through the
// broker get the access token injected, the broker refreshes it after it expires (the server
// rotates refresh tokens and revokes a grant whose old one is reused: zero reuse), and
// `auth remove` revokes the login at the server.
import type { ServerResponse } from "node:http";
import { join } from "node:path";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileTokenStore } from "../../state/tokens/home.js";
import { ROOT, runProcess } from "../helpers/broker.js";
import { freePort, startCli } from "../helpers/cli-session.js";
import { curlChatArgs } from "../helpers/curl.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { oauthLeaks } from "../helpers/oauth-leaks.js";
import { CLIENT_ID, IDP_HOST, type OidcServer, startOidcServer } from "../helpers/oidc-server.js";

let f: InProcessFixture;
let idp: OidcServer;
let callbackPort: number;
let agentEnv: Record<string, string>;

/** Access tokens live this long: every test below runs over several refreshes. */
const ACCESS_TTL = 3;

beforeAll(async () => {
  callbackPort = await freePort();
  idp = await startOidcServer({
    redirectUris: [`http://127.0.0.1:${callbackPort}/callback`],
    accessTtl: ACCESS_TTL,
  });
  f = await startInProcessFixture({
    rules: (u) => {
      u.routes.set("POST /v1/chat/completions", async (req, res: ServerResponse) => {
        const token = String(req.headers.authorization ?? "").replace(/^Bearer /, "");
        const ok = await idp.valid(token);
        const body = ok
          ? {
              id: "c",
              object: "chat.completion",
              created: 1,
              model: "m",
              choices: [
                {
                  index: 0,
                  message: { role: "assistant", content: "hello from upstream" },
                  finish_reason: "stop",
                },
              ],
            }
          : { error: { message: "invalid access token" } };
        res.writeHead(ok ? 200 : 401, { "content-type": "application/json" });
        res.end(JSON.stringify(body));
      });
      return `version: 1
upstream_ca: [${JSON.stringify(u.caPath)}, ${JSON.stringify(idp.caPath)}]
resolve:
  "api.openai.com:443": "127.0.0.1:${u.port}"
  "${IDP_HOST}:${idp.port}": "127.0.0.1:${idp.port}"
catalogue: false
providers:
  acme-oauth:
    hosts: [api.openai.com]
    placeholder: { env: OPENAI_API_KEY }
    oauth:
      issuer: ${idp.issuer}
      client_id: ${CLIENT_ID}
      scopes: [openid, offline_access]
      authorize_params: { prompt: consent }
      redirect_uri: http://127.0.0.1:${callbackPort}/callback
      token_timeout: 5s
`;
    },
  });
  const r = await f.cli(["env", "--format", "json"]);
  expect(r.status, r.stderr).toBe(0);
  agentEnv = JSON.parse(r.stdout) as Record<string, string>;
}, 60_000);

afterAll(async () => {
  await f?.close();
  await idp?.close();
  expect(idp.reuses).toBe(0);
  expect(oauthLeaks(f, idp.issued)).toEqual([]);
});

/** curl through the broker with the placeholder, as an agent's shell would: [status, token the upstream got]. */
async function curl(): Promise<{ status: string; token: string }> {
  const before = f.upstream.received.length;
  const r = await runProcess("curl", curlChatArgs(agentEnv.OPENAI_API_KEY!, "{}"), {
    env: { HTTPS_PROXY: agentEnv.HTTPS_PROXY!, CURL_CA_BUNDLE: agentEnv.CURL_CA_BUNDLE! },
  });
  const got = f.upstream.received.slice(before).at(-1);
  return {
    status: r.stdout.trim().split("\n").at(-1)!,
    token: String(got?.headers.authorization ?? "").replace(/^Bearer /, ""),
  };
}

async function openaiSdk(): Promise<{ status: number; content?: string }> {
  const r = await runProcess(process.execPath, [join(ROOT, "test/fixtures/clients/openai-chat.mjs")], {
    env: agentEnv,
  });
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout.trim().split("\n").at(-1)!);
}

/** The broker follows the token store by a file watch: wait until it serves with a login. */
async function servedByCurl() {
  const deadline = Date.now() + 10_000;
  let r = await curl();
  while (r.status !== "200" && Date.now() < deadline) {
    await new Promise((x) => setTimeout(x, 100));
    r = await curl();
  }
  return r;
}

describe("against oidc-provider", () => {
  it("device grant: auth add prints the URL, the user approves on the server's pages, curl is served", async () => {
    const add = startCli(f, ["auth", "add", "acme-oauth", "--label", "device"]);
    const [, url] = await add.waitFor(/open: (\S+)/);
    const [, code] = await add.waitFor(/enter the code: (\S+)/);
    expect(url).toContain(`${idp.issuer}/device`);
    expect(code).toBeTruthy();
    // The user opens the address (the code is in it) and signs in and confirms.
    await idp.browse(url!);
    expect(await add.exit(), add.err()).toBe(0);
    expect(add.out()).toContain('acme-oauth: logged in as credential "device"');

    const served = await servedByCurl();
    expect(served.status).toBe("200");
    expect(idp.issued).toContain(served.token);
    const stored = await new FileTokenStore(f.home).get("acme-oauth", "device");
    expect(stored?.refreshToken).toBeDefined();
  }, 60_000);

  it("PKCE: the browser comes back to the loopback callback; the openai SDK is served", async () => {
    const add = startCli(f, [
      "auth",
      "add",
      "acme-oauth",
      "--flow",
      "pkce",
      "--label",
      "web",
      "--no-browser",
    ]);
    const [, url] = await add.waitFor(/open: (\S+)/);
    const authorize = new URL(url!);
    expect(authorize.searchParams.get("code_challenge_method")).toBe("S256");
    const callback = await idp.browse(url!);
    expect(callback?.startsWith(`http://127.0.0.1:${callbackPort}/callback?`)).toBe(true);
    const res = await request(callback!);
    expect(res.statusCode).toBe(200);
    await res.body.dump();
    expect(await add.exit(), add.err()).toBe(0);

    // Only the PKCE login left: the device one is removed and revoked at the server.
    const device = (await new FileTokenStore(f.home).get("acme-oauth", "device"))!;
    expect(await idp.refreshValid(device.refreshToken!)).toBe(true);
    const removed = await f.cli(["auth", "remove", "acme-oauth", "--credential", "device"]);
    expect(removed.stdout).toContain("revoked it at the authorization server");
    // Revoked at the server: its refresh token is refused there from now on.
    expect(await idp.refreshValid(device.refreshToken!)).toBe(false);
    const web = (await new FileTokenStore(f.home).get("acme-oauth", "web"))!;
    expect(await idp.valid(web.accessToken)).toBe(true);
    expect(device.accessToken).not.toBe(web.accessToken);

    const deadline = Date.now() + 10_000;
    let sdk = await openaiSdk();
    while (sdk.status !== 200 && Date.now() < deadline) sdk = await openaiSdk();
    expect(sdk).toEqual({ status: 200, content: "hello from upstream" });
  }, 60_000);

  it("refreshes after expiry: requests keep being served across rotations, zero reuse", async () => {
    const first = (await new FileTokenStore(f.home).get("acme-oauth", "web"))!;
    const start = idp.refreshes;
    const errors = idp.errors.length;
    const deadline = Date.now() + 30_000;
    const statuses: string[] = [];
    while (idp.refreshes < start + 2 && Date.now() < deadline) statuses.push((await curl()).status);
    expect(idp.refreshes).toBeGreaterThanOrEqual(start + 2);
    expect(statuses.filter((s) => s !== "200")).toEqual([]);
    const now = (await new FileTokenStore(f.home).get("acme-oauth", "web"))!;
    expect(now.refreshToken).not.toBe(first.refreshToken);
    expect(now.createdAt).toBe(first.createdAt);
    expect(idp.reuses).toBe(0);
    expect(idp.errors.slice(errors)).toEqual([]);
  }, 60_000);
});
