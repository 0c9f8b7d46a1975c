// Roles and approvals end to end (docs/spec.md §16): real curl clients through a real broker to a fake
// provider; held requests answered with the real `keybroker approvals|approve|deny` commands and
// the admin API; guest clients, role- and client-scoped rules, per-client rpm limits.
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type CliResult, cliAsync, findSecrets, runProcess, tempHome } from "../helpers/broker.js";
import { type Fixture, REAL_GITHUB, rulesFor, startFixture } from "../helpers/fixture.js";

const TOKENS = {
  KB_CRON_TOKEN: "kb-cron-token-5d1c9a7e3b",
  KB_GUEST_TOKEN: "kb-guest-token-8f2e6c4a0d",
  KB_BOSS_TOKEN: "kb-boss-token-1a3c5e7b9d",
  KB_METER_TOKEN: "kb-meter-token-7c9e1b3d5f",
};

let f: Fixture;
let ghPlaceholder: string;
/** `notify` appends each event it gets on stdin here. */
let notified: string;

beforeAll(async () => {
  const scripts = tempHome();
  const notifyScript = join(scripts, "notify.sh");
  notified = join(scripts, "events.jsonl");
  writeFileSync(notifyScript, '#!/bin/sh\ncat >> "$1"\n', { mode: 0o755 });
  f = await startFixture({
    env: TOKENS,
    rules: (u) =>
      rulesFor(
        u,
        `      - approve: { method: [PUT, PATCH], path: "/repos/*/*/branches/**" }
      - approve: { method: POST, path: "/repos/*/*/pulls" }
      - approve: { method: PUT, path: "/repos/*/*/topics", timeout: 1s }
      - deny: { method: GET, path: "/user/emails", roles: [user] }
      - deny: { method: GET, path: "/user/keys", clients: [cron] }
    pool: { retry_body_limit: 64KiB }
approvals: { timeout: 30s }
notify: "cmd:${notifyScript} ${notified}"
clients:
  default: { providers: "*" }
  cron: { token: KB_CRON_TOKEN, providers: [openai, github] }
  visitor: { token: KB_GUEST_TOKEN, providers: [github], role: guest }
  boss: { token: KB_BOSS_TOKEN, role: admin }
  meter: { token: KB_METER_TOKEN, providers: [openai], limits: { rpm: 3 } }
`,
      ),
  });
  ghPlaceholder = await f.placeholder("github");
});

afterAll(async () => {
  await f?.close();
  expect(f.leaks()).toEqual([]);
  expect(
    findSecrets(
      [REAL_GITHUB, ...Object.values(TOKENS)],
      [],
      [existsSync(notified) ? readFileSync(notified, "utf8") : ""],
    ),
  ).toEqual([]);
});

/** The events `notify` got, once one names approval `id` (the command runs on its own time). */
async function notifiedAbout(id: string): Promise<Record<string, unknown>[]> {
  for (;;) {
    const text = existsSync(notified) ? readFileSync(notified, "utf8") : "";
    const events = text
      .split("\n")
      .filter((l) => l.endsWith("}"))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    if (events.some((e) => e.id === id)) return events;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** curl through the broker as `client` (default: the default client), printing the status last. */
function curlArgs(method: string, url: string, opts: { client?: string; body?: string } = {}): string[] {
  const proxy =
    opts.client === undefined ? f.broker.url : f.broker.url.replace("http://", `http://${opts.client}@`);
  return [
    "-sS",
    "-x",
    proxy,
    "--cacert",
    f.broker.bundlePath,
    "-X",
    method,
    url,
    ...(opts.client === undefined ? ["-u", `x-access-token:${ghPlaceholder}`] : []),
    ...(opts.body === undefined ? [] : ["-H", "content-type: application/json", "--data-binary", opts.body]),
    "-w",
    "\n%{http_code}",
  ];
}

/** Runs curl with proxy credentials for a client with a token. */
function curl(
  method: string,
  url: string,
  opts: { client?: string; body?: string } = {},
): Promise<CliResult> {
  const args = curlArgs(method, url, { ...opts, client: opts.client && proxyUser(opts.client) });
  return runProcess("curl", args);
}

function proxyUser(client: string): string {
  const token = {
    cron: TOKENS.KB_CRON_TOKEN,
    visitor: TOKENS.KB_GUEST_TOKEN,
    boss: TOKENS.KB_BOSS_TOKEN,
    meter: TOKENS.KB_METER_TOKEN,
  }[client];
  return `${client}:${token}`;
}

function status(r: CliResult): number {
  return Number(r.stdout.trimEnd().split("\n").at(-1));
}

function errorType(r: CliResult): string | undefined {
  const body = r.stdout.trimEnd().split("\n").slice(0, -1).join("\n");
  return (JSON.parse(body) as { error?: { type: string } }).error?.type;
}

/** Resolves once the broker's log (stderr) matches `re` more than `after` times; no polling. */
async function logMatch(re: RegExp, after: number): Promise<RegExpExecArray[]> {
  const child = f.broker.child;
  for (;;) {
    const all = [...f.broker.stderr().matchAll(new RegExp(re.source, "g"))];
    if (all.length > after) return all;
    await once(child.stderr!, "data");
  }
}

const HELD =
  /for approval ([0-9a-f]{8}): to let it through run {2}(keybroker approve [0-9a-f]{8} --home \S+) {2}/;

function heldCount(): number {
  return [...f.broker.stderr().matchAll(new RegExp(HELD.source, "g"))].length;
}

/** Starts a curl whose request will be held; resolves with its id once the broker holds it. */
async function startHeld(
  method: string,
  url: string,
  body?: string,
): Promise<{ id: string; command: string; done: Promise<CliResult>; child: () => ChildProcess }> {
  const before = heldCount();
  let child: ChildProcess | undefined;
  const done = new Promise<CliResult>((resolve) => {
    child = spawn("curl", curlArgs(method, url, body === undefined ? {} : { body }), {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout!.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr!.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    child.once("close", (code) => resolve({ status: code, stdout, stderr }));
  });
  const m = (await logMatch(HELD, before))[before]!;
  return { id: m[1]!, command: m[2]!, done, child: () => child! };
}

/** Answers with the home's admin token through the admin API (as the admin page would). */
async function answer(id: string, verb: "approve" | "deny"): Promise<void> {
  const token = readFileSync(join(f.home, "admin.token"), "utf8").trim();
  const res = await request(`${f.broker.url}/__keybroker/admin/approvals/${id}/${verb}`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}` },
  });
  expect(res.statusCode).toBe(200);
  await res.body.dump();
}

/** `keybroker approvals --json`: what a person at a terminal sees. */
async function pendingCli(): Promise<Record<string, unknown>[]> {
  const r = await f.cli(["approvals", "--json"]);
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Record<string, unknown>[];
}

/** The same list from the admin API (with the home's admin token), without starting a CLI. */
async function pending(): Promise<Record<string, unknown>[]> {
  const token = readFileSync(join(f.home, "admin.token"), "utf8").trim();
  const res = await request(`${f.broker.url}/__keybroker/admin/approvals`, {
    headers: { authorization: `Bearer ${token}` },
  });
  expect(res.statusCode).toBe(200);
  return ((await res.body.json()) as { approvals: Record<string, unknown>[] }).approvals;
}

function auditLines(chain: "audit" | "security"): Record<string, unknown>[] {
  return readFileSync(join(f.home, "audit", `${chain}.jsonl`), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/**
 * The security chain's lines about approval `id`, once `last` is among them: the broker writes
 * its audit lines asynchronously, and a file gives no event to wait for, so this re-reads it.
 */
async function approvalLines(id: string, last: string): Promise<Record<string, unknown>[]> {
  for (;;) {
    const lines = auditLines("security").filter((l) => String(l.reason ?? "").includes(id));
    if (lines.some((l) => l.decision === last)) return lines;
    await new Promise((r) => setTimeout(r, 20));
  }
}

const decisions = (lines: Record<string, unknown>[]) => lines.map((l) => l.decision);

const BRANCH = "https://api.github.com/repos/o/r/branches/main/protection";

describe("approvals", () => {
  it("holds a request until `keybroker approve`: the log names the id and the command; the body and credential go out once approved", async () => {
    const before = f.upstream.received.length;
    const body = JSON.stringify({ required_status_checks: null, note: `token ${REAL_GITHUB}` });
    const held = await startHeld("PUT", BRANCH, body);
    // Nothing left for upstream while it waits.
    expect(f.upstream.received.length).toBe(before);
    const list = await pendingCli();
    expect(list).toHaveLength(1);
    const what = {
      id: held.id,
      client: "default",
      provider: "github",
      method: "PUT",
      host: "api.github.com",
      path: "/repos/o/r/branches/main/protection",
    };
    expect(list[0]).toMatchObject(what);
    expect(list[0]!.seconds_left).toBeGreaterThan(0);
    expect(list[0]!.seconds_left).toBeLessThanOrEqual(30);
    // The preview shows the body with the secret masked.
    expect(list[0]!.preview).toContain("required_status_checks");
    expect(list[0]!.preview).not.toContain(REAL_GITHUB);
    const human = await f.cli(["approvals"]);
    expect(human.stdout).toContain(held.id);
    expect(human.stdout).toContain("PUT api.github.com/repos/o/r/branches/main/protection");

    // notify got the pending request, names only: no body, no header.
    const event = (await notifiedAbout(held.id)).find((e) => e.id === held.id);
    expect(event).toMatchObject({ event: "approval_pending", ...what });
    expect(JSON.stringify(event)).not.toContain("required_status_checks");
    expect(JSON.stringify(event)).not.toContain(ghPlaceholder);

    // The exact command the log printed lets it through.
    const approve = await cliAsync(held.command.split(" ").slice(1));
    expect(approve.status, approve.stderr).toBe(0);
    expect(approve.stdout).toContain(`approved ${held.id}`);
    const r = await held.done;
    expect(status(r), r.stderr).toBe(200);
    const got = f.upstream.received.at(-1)!;
    expect(got.method).toBe("PUT");
    expect(got.url).toBe("/repos/o/r/branches/main/protection");
    expect(got.body.toString()).toBe(body);
    expect(got.headers.authorization).toBe(
      `Basic ${Buffer.from(`x-access-token:${REAL_GITHUB}`).toString("base64")}`,
    );
    expect(await pending()).toEqual([]);
    const security = await approvalLines(held.id, "approved");
    expect(decisions(security)).toEqual(["held", "approved"]);
    expect(security[1]!.reason).toContain("approved by admin token");
  });

  it("deny: the client gets 403 policy_denied and nothing goes upstream", async () => {
    const before = f.upstream.received.length;
    const held = await startHeld("PATCH", BRANCH);
    const deny = await f.cli(["deny", held.id]);
    expect(deny.status, deny.stderr).toBe(0);
    expect(deny.stdout).toContain(`denied ${held.id}`);
    const r = await held.done;
    expect(status(r)).toBe(403);
    expect(errorType(r)).toBe("policy_denied");
    expect(f.upstream.received.length).toBe(before);
    expect(decisions(await approvalLines(held.id, "denied"))).toEqual(["held", "denied"]);
  });

  it("the rule's timeout refuses an unanswered request with 403 approval_timeout", async () => {
    const before = f.upstream.received.length;
    const r = await curl("PUT", "https://api.github.com/repos/o/r/topics", { body: '{"names":["x"]}' });
    expect(status(r)).toBe(403);
    expect(errorType(r)).toBe("approval_timeout");
    expect(f.upstream.received.length).toBe(before);
    const id = /approval ([0-9a-f]{8})/.exec(r.stdout)?.[1];
    expect(id).toBeDefined();
    expect(decisions(await approvalLines(id!, "approval_timeout"))).toEqual(["held", "approval_timeout"]);
    // The request's own line: refused with the same code.
    const last = auditLines("audit").findLast((l) => l.decision === "blocked");
    expect(last).toMatchObject({ code: "approval_timeout", status: 403, path: "/repos/o/r/topics" });
    expect(await pending()).toEqual([]);
  });

  it("a client that hangs up withdraws its request: the list empties and the audit says so", async () => {
    const before = f.upstream.received.length;
    const held = await startHeld("PUT", BRANCH, "{}");
    expect((await pending()).map((p) => p.id)).toEqual([held.id]);
    held.child().kill("SIGKILL");
    await held.done;
    const lines = await approvalLines(held.id, "withdrawn");
    expect(decisions(lines)).toEqual(["held", "withdrawn"]);
    expect(lines[1]!.reason).toContain("the client hung up");
    // The chains with these new lines still verify.
    const verify = await f.cli(["audit", "verify"]);
    expect(verify.status, verify.stdout + verify.stderr).toBe(0);
    expect(await pending()).toEqual([]);
    // Too late to approve: the id is gone, and the error says what to run.
    const late = await f.cli(["approve", held.id]);
    expect(late.status).toBe(1);
    expect(late.stderr).toContain(`no pending approval "${held.id}"`);
    expect(late.stderr).toContain("keybroker approvals");
    expect(f.upstream.received.length).toBe(before);
  });

  it("approve --for lets the same client, provider and rule through without asking for a while", async () => {
    const url = "https://api.github.com/repos/o/r/pulls";
    const held = await startHeld("POST", url, '{"title":"one"}');
    const approve = await f.cli(["approve", held.id, "--for", "10m"]);
    expect(approve.status, approve.stderr).toBe(0);
    expect(approve.stdout).toContain("pass without asking until");
    expect(status(await held.done)).toBe(200);
    const heldBefore = heldCount();
    const second = await curl("POST", url, { body: '{"title":"two"}' });
    expect(status(second)).toBe(200);
    expect(f.upstream.received.at(-1)!.body.toString()).toBe('{"title":"two"}');
    expect(heldCount()).toBe(heldBefore);
    // Another rule still asks.
    const other = await startHeld("PUT", BRANCH);
    await answer(other.id, "deny");
    expect(status(await other.done)).toBe(403);
    const covered = await approvalLines("covered by an earlier approve --for", "approved");
    expect(covered[0]).toMatchObject({ client: "default", provider: "github", method: "POST" });
  });

  it("a body above the retry cap is refused with 413 at once, not held", async () => {
    const before = f.upstream.received.length;
    const held = heldCount();
    const r = await curl("PUT", BRANCH, { body: JSON.stringify({ blob: "x".repeat(100 * 1024) }) });
    expect(status(r)).toBe(413);
    expect(errorType(r)).toBe("payload_too_large");
    expect(r.stdout).toContain("retry_body_limit");
    // Streamed (chunked, no length given): refused once the cap is passed, not held.
    const file = join(tempHome(), "big.json");
    writeFileSync(file, JSON.stringify({ blob: "y".repeat(2 * 1024 * 1024) }));
    const args = curlArgs("PUT", BRANCH).concat([
      "-H",
      "transfer-encoding: chunked",
      "--data-binary",
      `@${file}`,
    ]);
    const streamed = await runProcess("curl", args);
    expect(status(streamed)).toBe(413);
    expect(errorType(streamed)).toBe("payload_too_large");
    expect(heldCount()).toBe(held);
    expect(f.upstream.received.length).toBe(before);
    expect(await pending()).toEqual([]);
  });

  it("the admin API by role: an admin client's token may answer approvals; user and guest tokens get 403; unknown ones 407", async () => {
    const api = `${f.broker.url}/__keybroker/admin/approvals`;
    const as = async (token: string, path = "", method: "GET" | "POST" = "GET") => {
      const res = await request(`${api}${path}`, { method, headers: { authorization: `Bearer ${token}` } });
      return { status: res.statusCode, body: (await res.body.json()) as Record<string, unknown> };
    };
    for (const token of [TOKENS.KB_CRON_TOKEN, TOKENS.KB_GUEST_TOKEN]) {
      const res = await as(token);
      expect(res.status).toBe(403);
      expect((res.body.error as { type: string }).type).toBe("policy_denied");
    }
    expect((await as("not-a-token")).status).toBe(407);
    // The rest of the admin API by role: an admin reads the status; only owners get the rest.
    const admin = `${f.broker.url}/__keybroker/admin`;
    const at = async (token: string, path: string) =>
      (await request(`${admin}/${path}`, { headers: { authorization: `Bearer ${token}` } })).statusCode;
    expect(await at(TOKENS.KB_BOSS_TOKEN, "status")).toBe(200);
    expect(await at(TOKENS.KB_BOSS_TOKEN, "agent?client=cron")).toBe(403);
    expect(await at(TOKENS.KB_CRON_TOKEN, "status")).toBe(403);
    const held = await startHeld("PUT", BRANCH);
    const refused = await as(TOKENS.KB_CRON_TOKEN, `/${held.id}/approve`, "POST");
    expect(refused.status).toBe(403);
    const list = await as(TOKENS.KB_BOSS_TOKEN);
    expect((list.body.approvals as { id: string }[]).map((a) => a.id)).toEqual([held.id]);
    const ok = await as(TOKENS.KB_BOSS_TOKEN, `/${held.id}/approve`, "POST");
    expect(ok.status).toBe(200);
    expect(status(await held.done)).toBe(200);
    const lines = await approvalLines(held.id, "approved");
    expect(lines.at(-1)!.reason).toContain("approved by client boss");
  });

  it("CLI errors: no broker running, a missing id", async () => {
    const none = await cliAsync(["approvals", "--home", tempHome()]);
    expect(none.status).toBe(1);
    expect(none.stderr).toContain("no keybroker is running for");
    const missing = await f.cli(["approve"]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toContain("give the id that keybroker approvals shows");
    const badFor = await f.cli(["approve", "abc", "--for", "soon"]);
    expect(badFor.status).toBe(2);
  });

  it("a --for grant stays with its rule when a reload moves the rules: the rule put in its place still asks", async () => {
    const config = join(f.dir, "keybroker.yaml");
    const original = readFileSync(config, "utf8");
    const branchRule = `      - approve: { method: [PUT, PATCH], path: "/repos/*/*/branches/**" }\n`;
    expect(original).toContain(branchRule);
    const held = await startHeld("PUT", BRANCH);
    expect((await f.cli(["approve", held.id, "--for", "10m"])).status).toBe(0);
    expect(status(await held.done)).toBe(200);
    const reload = async (text: string) => {
      const count = () => f.broker.stderr().split("rules reloaded").length;
      const before = count();
      writeFileSync(config, text);
      f.broker.child.kill("SIGHUP");
      while (count() === before) await new Promise((r) => setTimeout(r, 20));
    };
    try {
      // A new approve rule where the branch rule was: the grant does not pass to it.
      const issues = `      - approve: { method: GET, path: "/repos/*/*/issues" }\n`;
      await reload(original.replace(branchRule, issues + branchRule));
      const asked = await startHeld("GET", "https://api.github.com/repos/o/r/issues");
      await answer(asked.id, "deny");
      expect(status(await asked.done)).toBe(403);
      // The branch rule, one place further down, is still covered by its grant.
      const before = heldCount();
      expect(status(await curl("PUT", BRANCH))).toBe(200);
      expect(heldCount()).toBe(before);
    } finally {
      await reload(original);
    }
  });
});

describe("roles and limits", () => {
  it("a guest uses its providers with safe methods only", async () => {
    expect(status(await curl("GET", "https://api.github.com/user", { client: "visitor" }))).toBe(200);
    const head = await runProcess("curl", [
      "-I",
      ...curlArgs("GET", "https://api.github.com/user", { client: proxyUser("visitor") }).filter(
        (a) => a !== "-X" && a !== "GET",
      ),
    ]);
    expect(status(head)).toBe(200);
    const before = f.upstream.received.length;
    const post = await curl("POST", "https://api.github.com/repos/o/r/issues", {
      client: "visitor",
      body: "{}",
    });
    expect(status(post)).toBe(403);
    expect(errorType(post)).toBe("policy_denied");
    expect(post.stdout).toContain("guest");
    expect(f.upstream.received.length).toBe(before);
  });

  it("rules scoped with roles: and clients: apply to those clients only", async () => {
    // roles: [user] — the default client is a user, boss is an admin.
    const emails = "https://api.github.com/user/emails";
    expect(errorType(await curl("GET", emails))).toBe("policy_denied");
    expect(status(await curl("GET", emails, { client: "boss" }))).toBe(200);
    // clients: [cron]
    const keys = "https://api.github.com/user/keys";
    expect(errorType(await curl("GET", keys, { client: "cron" }))).toBe("policy_denied");
    expect(status(await curl("GET", keys))).toBe(200);
  });

  it("limits.rpm: the request over the cap gets 429 client_rate_limited with retry-after; other clients go on", async () => {
    const url = "https://api.openai.com/v1/models";
    for (let i = 0; i < 3; i++) expect(status(await curl("GET", url, { client: "meter" }))).toBe(200);
    const args = curlArgs("GET", url, { client: proxyUser("meter") });
    const over = await runProcess("curl", ["-D", "-", ...args]);
    expect(over.stdout).toMatch(/^HTTP\/1\.1 429/m);
    expect(over.stdout).toMatch(/retry-after: \d+/i);
    expect(over.stdout).toContain('"client_rate_limited"');
    expect(status(await curl("GET", url, { client: "cron" }))).toBe(200);
    // Refusals over the cap go to the audit log, but not to the security chain.
    for (;;) {
      if (auditLines("audit").some((l) => l.code === "client_rate_limited")) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(auditLines("security").some((l) => l.code === "client_rate_limited")).toBe(false);
  });
});
