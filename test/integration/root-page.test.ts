// The address `keybroker start` prints leads somewhere (decision 142): a person who opens it in
// a browser reads what the port is, how to point an agent at it and the way to the admin page;
// a program that asks the root gets an error that says the same; the start line names
// `keybroker admin`. The page is static: nothing of the rules, the keys or the admin token.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchChromium } from "../helpers/admin-http.js";
import {
  type BrokerProcess,
  findSecrets,
  outputs,
  startBroker,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { REAL_OPENAI } from "../helpers/fixture.js";

let broker: BrokerProcess;
const answers: string[] = [];

function curl(...args: string[]): string {
  const out = execFileSync("curl", ["-sS", "--noproxy", "*", "--max-time", "10", ...args], {
    encoding: "utf8",
  });
  answers.push(out);
  return out;
}

beforeAll(async () => {
  const config = writeConfig(
    tempHome(),
    "version: 1\nproviders:\n  openai: { credentials: [OPENAI_API_KEY] }\n",
  );
  broker = await startBroker({ config, env: { OPENAI_API_KEY: REAL_OPENAI } });
});

afterAll(async () => {
  await broker.stop();
  expect(findSecrets([REAL_OPENAI], [], [...outputs, ...answers])).toEqual([]);
});

describe("the listener's root", () => {
  it("the start line names the way to the admin page", () => {
    expect(broker.stdout()).toContain(
      `keybroker listening on ${broker.url} · CA ${broker.caPath} · admin page: keybroker admin`,
    );
  });

  it("shows a browser what this is, keybroker env and the admin page, and nothing of the rules", () => {
    const out = curl("-H", "Accept: text/html,application/xhtml+xml,*/*;q=0.8", "-i", `${broker.url}/`);
    const [head, body = ""] = out.split("\r\n\r\n");
    expect(head).toMatch(/^HTTP\/1\.1 200/);
    expect(head).toMatch(/content-type: text\/html; charset=utf-8/i);
    expect(head).toMatch(/content-security-policy: default-src 'none'/i);
    expect(body).toContain("keybroker's proxy");
    expect(body).toContain('eval "$(keybroker env)"');
    expect(body).toContain("keybroker run -- COMMAND");
    expect(body).toContain('<a href="/admin/">Open the admin page</a>');
    expect(body).toContain("<code>keybroker admin</code>");
    const adminToken = readFileSync(join(broker.home, "admin.token"), "utf8").trim();
    for (const kept of [adminToken, "openai", String(broker.port), broker.home, "0.1.0"]) {
      expect(body).not.toContain(kept);
    }
  });

  it("answers a program with an error that says what to use instead", () => {
    const out = curl("-w", "\n%{http_code}", `${broker.url}/`);
    const status = out.slice(out.lastIndexOf("\n") + 1);
    const body = JSON.parse(out.slice(0, out.lastIndexOf("\n"))) as {
      error: { type: string; message: string; hint: string };
    };
    expect(status).toBe("400");
    expect(body.error.type).toBe("bad_request");
    expect(body.error.message).toBe("nothing is served at /: this port is keybroker's proxy");
    expect(body.error.hint).toContain('eval "$(keybroker env)"');
    expect(body.error.hint).toContain("/admin/ (keybroker admin prints a login link)");
  });

  it("leads a real browser to the admin page's login", async () => {
    const browser = await launchChromium();
    try {
      const page = await browser.newPage();
      const res = await page.goto(`${broker.url}/`);
      expect(res?.status()).toBe(200);
      expect(await page.title()).toBe("keybroker");
      await page.getByRole("link", { name: "Open the admin page" }).click();
      await page.waitForURL(/\/admin\/login/);
      const text = (await page.locator("body").textContent()) ?? "";
      answers.push(text);
      expect(text).toContain("keybroker admin");
    } finally {
      await browser.close();
    }
  });
});
