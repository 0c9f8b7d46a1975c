// docs/spec.md §12, nothing lost: a full audit folder (a real tmpfs) is reported, counted and recorded
// by a `gap` line when writing resumes; `audit: { require: true }` refuses to inject meanwhile;
// and the security chain keeps blocked events that ordinary traffic rotates out of audit.jsonl.
import { spawnSync } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type ProxyAgent, request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { sendBlockedRequest } from "../helpers/fixture.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";

const open: InProcessFixture[] = [];
const mounts: string[] = [];
afterEach(async () => {
  for (const f of open.splice(0)) {
    await f.close();
    expect(f.leaks()).toEqual([]);
  }
  for (const m of mounts.splice(0)) spawnSync("umount", [m]);
});

/** A 128 KiB tmpfs on the home's audit folder, filled up by `filler`. */
function fullAuditFolder(home: string): void {
  const dir = join(home, "audit");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const r = spawnSync("mount", ["-t", "tmpfs", "-o", "size=128k,mode=0700", "tmpfs", dir]);
  if (r.status !== 0) throw new Error(`this test needs to mount a tmpfs (root): ${r.stderr}`);
  mounts.push(dir);
  fill(dir);
}

function fill(dir: string): void {
  try {
    writeFileSync(join(dir, "filler"), Buffer.alloc(256 * 1024, 1));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOSPC") throw err;
  }
}

async function get(agent: ProxyAgent, ph: string) {
  const res = await request("https://api.openai.com/v1/models", {
    dispatcher: agent,
    headers: { authorization: `Bearer ${ph}` },
  });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

async function waitForStderr(f: InProcessFixture, text: string): Promise<void> {
  while (!f.broker.stderr().includes(text)) await once(f.broker.logged, "data");
}

function records(home: string, file: string): { decision: string; lost?: number; code?: string }[] {
  return readFileSync(join(home, "audit", file), "utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l));
}

describe("a full audit folder", () => {
  it("is reported once, shown by status, and recorded by a gap line that verify reports (exit 4)", async () => {
    const f = await startInProcessFixture({ prepareHome: fullAuditFolder });
    open.push(f);
    const agent = f.proxyAgent();
    const ph = await f.placeholder("openai");
    const REQUESTS = 100;
    for (let i = 0; i < REQUESTS; i++) expect((await get(agent, ph)).status).toBe(200);
    await waitForStderr(f, "no space left on device");
    const status = await f.cli(["status", "--json"]);
    const report = JSON.parse(status.stdout) as { audit: { file: string; writing: boolean; lost: number }[] };
    const main = report.audit.find((a) => a.file.endsWith("audit.jsonl"))!;
    expect(main.writing).toBe(false);
    expect((await f.cli(["status"])).stdout).toMatch(
      /audit: \S+audit\.jsonl NOT WRITING since .*no space left/,
    );
    // Logged once, not once per batch.
    expect(f.broker.stderr().split("cannot write").length - 1).toBeLessThanOrEqual(2);

    rmSync(join(f.home, "audit", "filler"));
    await waitForStderr(f, "writing again");
    for (let i = 0; i < 5; i++) expect((await get(agent, ph)).status).toBe(200);
    await agent.close();
    await f.broker.stop();
    const recs = records(f.home, "audit.jsonl");
    const gaps = recs.filter((r) => r.decision === "gap");
    const written = recs.filter((r) => r.decision === "injected").length;
    expect(gaps).toHaveLength(1);
    // Every request is accounted for: on record, or counted by the gap line.
    expect(written + gaps[0]!.lost!).toBe(REQUESTS + 5);
    const verify = await f.cli(["audit", "verify"]);
    expect(verify.status, verify.stdout + verify.stderr).toBe(4);
    expect(verify.stdout).toMatch(/audit log records 1 gap\(s\): \d+ event\(s\) lost/);
    expect(verify.stdout).toMatch(/gap at audit\.jsonl line \d+: \d+ event\(s\) from \S+ to \S+/);
  }, 120_000);

  it("with audit: { require: true }, refuses to inject (503 audit_unavailable) until it can write", async () => {
    const f = await startInProcessFixture({
      prepareHome: fullAuditFolder,
      extraRules: "audit: { require: true }\n",
    });
    open.push(f);
    const agent = f.proxyAgent();
    const ph = await f.placeholder("openai");
    const before = f.upstream.received.length;
    let refused: Awaited<ReturnType<typeof get>> | undefined;
    let served = 0;
    // The broker learns the disk is full from its first failed write (within ~20 ms of a request).
    for (let i = 0; i < 200 && refused === undefined; i++) {
      const r = await get(agent, ph);
      if (r.status === 503) refused = r;
      else served++;
    }
    expect(refused).toBeDefined();
    expect(refused!.headers["x-keybroker-error"]).toBe("audit_unavailable");
    expect(JSON.parse(refused!.text).error).toMatchObject({ type: "audit_unavailable", provider: "openai" });
    expect(f.upstream.received.length).toBe(before + served);
    expect((await get(agent, ph)).status).toBe(503);

    rmSync(join(f.home, "audit", "filler"));
    await waitForStderr(f, "writing again");
    expect((await get(agent, ph)).status).toBe(200);
    await agent.close();
  }, 120_000);
});

describe("the security chain", () => {
  it("keeps a blocked request that ordinary traffic rotated out of audit.jsonl; verify checks both, tail --security shows it", async () => {
    const f = await startInProcessFixture({ extraRules: "audit: { max_size: 4KiB, keep: 1 }\n" });
    open.push(f);
    const agent = f.proxyAgent();
    const openai = await f.placeholder("openai");
    expect(await sendBlockedRequest(agent, openai)).toBe(403);
    for (let i = 0; i < 60; i++) expect((await get(agent, openai)).status).toBe(200);
    await agent.close();
    await f.broker.stop();
    const files = readdirSync(join(f.home, "audit"));
    const ordinary = files.filter((n) => n.startsWith("audit")).flatMap((n) => records(f.home, n));
    expect(ordinary.some((r) => r.decision === "blocked")).toBe(false);
    expect(records(f.home, "security.jsonl")).toEqual([
      expect.objectContaining({ decision: "blocked", code: "placeholder_host_mismatch" }),
    ]);
    const verify = await f.cli(["audit", "verify"]);
    expect(verify.status, verify.stderr).toBe(0);
    expect(verify.stdout).toContain("security log intact: 1 line(s)");
    // A changed security line is caught.
    const sec = join(f.home, "audit", "security.jsonl");
    writeFileSync(sec, readFileSync(sec, "utf8").replace("placeholder_host_mismatch", "policy_denied"));
    const broken = await f.cli(["audit", "verify"]);
    expect(broken.status).toBe(1);
    expect(broken.stderr).toContain("security log broken at security.jsonl line 1");
    const tail = await f.cli(["audit", "tail", "--security"]);
    expect(tail.stdout).toMatch(/blocked .*api\.anthropic\.com/);
  }, 120_000);
});
