// docs/spec.md §12: every decision the broker takes is on record, in a hash chain that `audit verify`
// checks, without a credential value anywhere in it.
import { readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cliAsync } from "../helpers/broker.js";
import { REAL_GEMINI, sendBlockedRequest } from "../helpers/fixture.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";

let f: InProcessFixture;
let agent: ProxyAgent;

beforeAll(async () => {
  f = await startInProcessFixture();
  agent = f.proxyAgent();
});
afterAll(async () => {
  await agent?.close();
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

function lines(): Record<string, unknown>[] {
  return readFileSync(join(f.home, "audit", "audit.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe("audit log", () => {
  it("records injected, passthrough and blocked requests, verifiably, without values", async () => {
    const gemini = await f.placeholder("gemini");
    const openai = await f.placeholder("openai");
    const ok = await request(`https://generativelanguage.googleapis.com/v1beta/models?key=${gemini}`, {
      dispatcher: agent,
    });
    await ok.body.text();
    const plain = await request("https://api.openai.com/v1/models", { dispatcher: agent });
    await plain.body.text();
    expect(await sendBlockedRequest(agent, openai)).toBe(403);
    // The broker writes the log after the response: stop it to flush.
    await f.broker.stop();

    const file = join(f.home, "audit", "audit.jsonl");
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(statSync(join(f.home, "audit")).mode & 0o777).toBe(0o700);
    const all = lines();
    const injected = all.find((l) => l.decision === "injected" && l.provider === "gemini")!;
    expect(injected).toMatchObject({
      client: "default",
      credential: "GEMINI_API_KEY",
      method: "GET",
      status: 200,
    });
    expect(String(injected.fingerprint)).toMatch(/^sha256:/);
    expect(String(injected.path)).not.toContain(REAL_GEMINI);
    expect(all.some((l) => l.decision === "passthrough" && l.provider === "openai")).toBe(true);
    expect(all.find((l) => l.decision === "blocked")).toMatchObject({
      code: "placeholder_host_mismatch",
      status: 403,
      host: "api.anthropic.com",
    });

    const verify = await cliAsync(["audit", "verify", "--home", f.home]);
    expect(verify.status, verify.stdout + verify.stderr).toBe(0);

    // Tampering with any line is caught and named.
    const text = readFileSync(file, "utf8").split("\n");
    text[1] = text[1]!.replace('"status":200', '"status":201');
    writeFileSync(file, text.join("\n"));
    const bad = await cliAsync(["audit", "verify", "--home", f.home]);
    expect(bad.status).toBe(1);
    expect(bad.stdout + bad.stderr).toMatch(/line 2/);
  });
});
