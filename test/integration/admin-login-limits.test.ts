// The admin page's failed-login limit (docs/spec.md §3.10, decision 105), against a real broker with a
// password set. Each case has a broker of its own: every loopback address counts as one (any
// local process can bind any 127.x address), so cases cannot share one. Parallel guesses are counted before the password is checked, so at most the
// limit are ever checked (the audit's admin_login_failed lines count the checks) and the rest are
// refused at once; a success takes back only its own count; a one-time link and a token log in
// while passwords are locked out.
import { spawnSync } from "node:child_process";
import { once } from "node:events";
import { existsSync, readFileSync } from "node:fs";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { join } from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
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

const PASSWORD = "limits password 5e8c1a7f";
const BOSS_TOKEN = "boss-token-limits-9d3f7b1e";
const LIMIT = 5;

let broker: BrokerProcess;
let home: string;
let config: string;
const answers: string[] = [];

/** A login form post from `from` (a loopback address of its own; node's client binds it). */
async function login(
  from: string,
  fields: Record<string, string>,
): Promise<{ status: number; text: string; session: boolean }> {
  const body = new URLSearchParams(fields).toString();
  const req = httpRequest({
    host: "127.0.0.1",
    port: broker.port,
    localAddress: from,
    method: "POST",
    path: "/admin/login",
    agent: false,
    headers: {
      "content-type": "application/x-www-form-urlencoded",
      "content-length": Buffer.byteLength(body),
    },
  });
  req.end(body);
  const [res] = (await once(req, "response")) as [IncomingMessage];
  let text = "";
  for await (const chunk of res) text += String(chunk);
  answers.push(text);
  // A login that worked starts a session: its cookie comes with the answer.
  const session = /^kb_admin_\d+=[\w-]/.test(String(res.headers["set-cookie"] ?? ""));
  return { status: res.statusCode ?? 0, text, session };
}

/** Passwords checked from `from` and found wrong: one audit line each (written in batches). */
function checkedWrong(from: string): number {
  const file = join(home, "audit", "security.jsonl");
  const audit = existsSync(file) ? readFileSync(file, "utf8") : "";
  return audit.split("\n").filter((l) => l.includes(`"reason":"from ${from}: wrong password or token"`))
    .length;
}

async function oneTimeCode(): Promise<string> {
  const link = await cliAsync(["admin", "--home", home, "--config", config]);
  expect(link.status, link.stderr).toBe(0);
  return new URL(
    /(http:\/\/127\.0\.0\.1:\d+\/admin\/login\?code=\S+)/.exec(link.stdout)![1]!,
  ).searchParams.get("code")!;
}

beforeEach(async () => {
  home = tempHome();
  config = writeConfig(
    tempHome(),
    `version: 1
listen: 127.0.0.1:0
providers: {}
clients:
  boss:
    token: BOSS_TOKEN
    role: owner
`,
  );
  const set = spawnSync(process.execPath, [CLI, "admin", "password", "--home", home], {
    input: `${PASSWORD}\n`,
    encoding: "utf8",
  });
  expect(set.status, set.stderr).toBe(0);
  broker = await startBroker({ home, config, env: { BOSS_TOKEN } });
});

afterEach(async () => {
  await broker?.stop();
});

afterAll(() => {
  expect(findSecrets([PASSWORD, BOSS_TOKEN], [], [...answers, ...outputs])).toEqual([]);
});

describe("admin page failed-login limit", () => {
  it("60 parallel wrong passwords: at most the limit are checked, the rest are refused with 429 at once", {
    timeout: 60_000,
  }, async () => {
    const from = "127.0.0.2";
    const results = await Promise.all(
      Array.from({ length: 60 }, (_, i) => login(from, { secret: `wrong guess ${i}` })),
    );
    const wrong = results.filter((r) => r.status === 401).length;
    const refused = results.filter((r) => r.status === 429);
    expect(wrong + refused.length).toBe(60);
    expect(wrong).toBeGreaterThan(0);
    expect(wrong).toBeLessThanOrEqual(LIMIT);
    await expect.poll(() => checkedWrong(from)).toBe(wrong);
    // Every refusal is still the form, saying why.
    for (const r of refused) {
      expect(r.text).toMatch(/<form method="post" action="\/admin\/login"/);
      expect(r.text).toMatch(/Too many failed logins from 127\.0\.0\.2|being checked/);
    }
    // Until the limit is reached, a guess after the burst is checked; from then on none is.
    for (let i = wrong; i < LIMIT; i++)
      expect((await login(from, { secret: "late guess" })).status).toBe(401);
    const locked = await login(from, { secret: PASSWORD });
    expect(locked.status).toBe(429);
    expect(locked.text).toMatch(/Too many failed logins from 127\.0\.0\.2: try again in 15 min/);
    await expect.poll(() => checkedWrong(from)).toBe(LIMIT);
  });

  it("a success takes back only its own count; a one-time link and a token log in while passwords are locked out", {
    timeout: 60_000,
  }, async () => {
    const from = "127.0.0.3";
    for (let i = 0; i < LIMIT - 1; i++) expect((await login(from, { secret: `typo ${i}` })).status).toBe(401);
    {
      const r = await login(from, { secret: PASSWORD });
      expect(r, r.text).toMatchObject({ session: true });
    }
    // The success did not wipe the failures before it: one more wrong guess reaches the limit.
    expect((await login(from, { secret: "one more" })).status).toBe(401);
    expect((await login(from, { secret: PASSWORD })).status).toBe(429);
    // Links and tokens are not passwords: they still log in from this address.
    expect(await login(from, { code: await oneTimeCode() })).toMatchObject({ session: true });
    expect(await login(from, { secret: BOSS_TOKEN })).toMatchObject({ session: true });
  });

  it("guesses from many loopback addresses share one count (found in review)", {
    timeout: 60_000,
  }, async () => {
    const froms = Array.from({ length: 8 }, (_, i) => `127.0.${i + 5}.${i + 2}`);
    const results = [];
    for (let round = 0; round < 5; round++)
      for (const from of froms) results.push(await login(from, { secret: `guess ${round} ${from}` }));
    expect(results.filter((r) => r.status === 401).length).toBe(LIMIT);
    expect(results.filter((r) => r.status === 429).length).toBe(results.length - LIMIT);
    // The right password from yet another loopback address is locked out too; a token is not.
    expect((await login("127.9.9.9", { secret: PASSWORD })).status).toBe(429);
    expect(await login("127.9.9.9", { secret: BOSS_TOKEN })).toMatchObject({ session: true });
  });
});
