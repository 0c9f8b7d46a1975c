import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { AuditLog, currentAuditFile, rotatedAuditFile } from "../../../audit/audit-log.js";
import { AuditFollower, formatAuditLine, lastAuditLines } from "../../../audit/audit-tail.js";
import { listAuditFiles } from "../../../audit/audit-verify.js";

const homes: string[] = [];
function home(): string {
  const h = mkdtempSync(join(tmpdir(), "kb-tail-"));
  homes.push(h);
  return h;
}
afterEach(() => {
  for (const h of homes.splice(0)) rmSync(h, { recursive: true, force: true });
});

async function write(log: AuditLog, from: number, to: number): Promise<void> {
  for (let i = from; i < to; i++) {
    log.record({
      decision: "injected",
      client: "default",
      provider: "openai",
      path: `/v1/x?n=${i}`,
      status: 200,
    });
  }
  await log.flush();
}

const nOf = (line: string) => Number(/n=(\d+)/.exec(line)![1]);

describe("formatAuditLine", () => {
  it("shows time, decision, client → provider, method host path and status on one line", () => {
    const line = JSON.stringify({
      time: "2026-05-01T12:00:00.000Z",
      decision: "blocked",
      client: "cron",
      provider: "openai",
      method: "POST",
      host: "evil.example",
      path: "/collect",
      status: 403,
      code: "placeholder_host_mismatch",
      prev: "0",
      hash: "1",
    });
    expect(formatAuditLine(line)).toBe(
      "2026-05-01T12:00:00.000Z  blocked          cron → openai  POST evil.example/collect  403  (placeholder_host_mismatch)",
    );
    expect(formatAuditLine(JSON.stringify({ time: "t", decision: "reload", reason: "rules changed" }))).toBe(
      "t  reload           -  (rules changed)",
    );
  });
});

describe("lastAuditLines", () => {
  it("returns the newest lines across rotated files", async () => {
    const h = home();
    const log = new AuditLog(h, { maxBytes: 800, keep: 10 });
    await write(log, 0, 30);
    await log.close();
    expect(listAuditFiles(h).length).toBeGreaterThan(3);
    const last = await lastAuditLines(h, 12);
    expect(last.map(nOf)).toEqual(Array.from({ length: 12 }, (_, i) => 18 + i));
    expect(await lastAuditLines(h, 0)).toEqual([]);
  });
});

describe("AuditFollower", () => {
  it("shows the last lines, then every new line once, in order, across rotations", async () => {
    const h = home();
    const log = new AuditLog(h, { maxBytes: 700, keep: 50 });
    await write(log, 0, 5);
    const seen: number[] = [];
    let waiting: { count: number; resolve: () => void } | undefined;
    const follower = new AuditFollower(h, {
      last: 2,
      onLine: (line) => {
        seen.push(nOf(line));
        if (waiting !== undefined && seen.length >= waiting.count) waiting.resolve();
      },
    });
    const until = (count: number) =>
      new Promise<void>((resolve) => {
        if (seen.length >= count) resolve();
        else waiting = { count, resolve };
      });
    await follower.start();
    expect(seen).toEqual([3, 4]);
    await write(log, 5, 8);
    await until(5);
    // Enough lines to rotate several times between two reads.
    await write(log, 8, 60);
    await until(57);
    await follower.stop();
    await log.close();
    expect(listAuditFiles(h).length).toBeGreaterThan(3);
    expect(seen).toEqual(Array.from({ length: 57 }, (_, i) => 3 + i));
  });

  it("waits for a log that does not exist yet", async () => {
    const h = home();
    const seen: string[] = [];
    let resolve!: () => void;
    const got = new Promise<void>((r) => {
      resolve = r;
    });
    const follower = new AuditFollower(h, {
      last: 10,
      onLine: (line) => {
        seen.push(line);
        resolve();
      },
    });
    await follower.start();
    const log = new AuditLog(h);
    log.record({ decision: "reload" });
    await log.close();
    await got;
    await follower.stop();
    expect(seen).toHaveLength(1);
    expect(JSON.parse(seen[0]!)).toMatchObject({ decision: "reload" });
  });

  it("waits for a rotated file that appears after the current one, and shows its lines in order", async () => {
    // A chain written in a scratch home; its last three files are A, B and C (the current one).
    const scratch = home();
    const log = new AuditLog(scratch, { maxBytes: 700 });
    await write(log, 0, 9);
    await log.close();
    const files = listAuditFiles(scratch);
    expect(files.length).toBeGreaterThanOrEqual(3);
    const [a, b, c] = files.slice(-3) as [string, string, string];
    const numbers = (f: string) => readFileSync(f, "utf8").split("\n").filter(Boolean).map(nOf);

    // The followed home: A is the current file when the follower starts.
    const h = home();
    mkdirSync(join(h, "audit"), { mode: 0o700 });
    copyFileSync(a, currentAuditFile(h));
    const seen: number[] = [];
    const follower = new AuditFollower(h, { last: 0, pollMs: 50, onLine: (line) => seen.push(nOf(line)) });
    await follower.start();

    // A slow rotation: A moves away and C is current before B is in place.
    renameSync(currentAuditFile(h), rotatedAuditFile(h, 2));
    copyFileSync(c, currentAuditFile(h));
    await new Promise((resolve) => setTimeout(resolve, 300));
    copyFileSync(b, `${rotatedAuditFile(h, 1)}.tmp`);
    renameSync(`${rotatedAuditFile(h, 1)}.tmp`, rotatedAuditFile(h, 1));

    const expected = [...numbers(b), ...numbers(c)];
    for (let waited = 0; seen.length < expected.length && waited < 5000; waited += 50) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await follower.stop();
    expect(seen).toEqual(expected);
  });
});
