import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { jsonValue, serialize, stripQuery } from "../../../audit/audit-line.js";
import {
  AuditLog,
  type AuditLogOptions,
  type AuditRecord,
  auditDir,
  currentAuditFile,
  GENESIS,
  rotatedAuditFile,
} from "../../../audit/audit-log.js";
import { listAuditFiles, verifyAudit } from "../../../audit/audit-verify.js";
import { knownSecrets, Scrubber } from "../../../core/scrub.js";
import { LINE_STRING_FIELDS, writeAuditEntries } from "../../helpers/audit.js";

const homes: string[] = [];
function home(): string {
  const h = mkdtempSync(join(tmpdir(), "kb-audit-"));
  homes.push(h);
  return h;
}
afterEach(() => {
  for (const h of homes.splice(0)) rmSync(h, { recursive: true, force: true });
});

function lines(path: string): string[] {
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l !== "");
}
function records(path: string): AuditRecord[] {
  return lines(path).map((l) => JSON.parse(l) as AuditRecord);
}

const writeEntries = (h: string, n: number, opts: AuditLogOptions = {}) => writeAuditEntries(h, n, opts);

describe("AuditLog", () => {
  it("writes one chained JSON line per decision with the SPEC's fields", async () => {
    const h = home();
    await writeEntries(h, 3);
    const recs = records(currentAuditFile(h));
    expect(recs).toHaveLength(3);
    expect(recs[0]).toMatchObject({
      decision: "injected",
      client: "default",
      provider: "openai",
      credential: "OPENAI_API_KEY",
      fingerprint: "sha256:0123456789ab",
      method: "POST",
      host: "api.openai.com",
      path: "/v1/chat/completions?n=0",
      status: 200,
      bytes_in: 1000,
      bytes_out: 200,
      duration_ms: 12.5,
      prev: GENESIS,
    });
    expect(Date.parse(recs[0]!.time)).not.toBeNaN();
    expect(recs[1]!.prev).toBe(recs[0]!.hash);
    expect(recs[2]!.prev).toBe(recs[1]!.hash);
    expect(await verifyAudit(h)).toMatchObject({ ok: true, lines: 3, fromGenesis: true });
  });

  it("creates the folder 0700 and the files 0600, rotated ones included", async () => {
    const h = home();
    await writeEntries(h, 20, { maxBytes: 1500, keep: 2 });
    expect(statSync(auditDir(h)).mode & 0o777).toBe(0o700);
    const files = listAuditFiles(h);
    expect(files.length).toBe(3);
    for (const f of files) expect(statSync(f).mode & 0o777, f).toBe(0o600);
  });

  it("removes the values of injected query parameters and scrubs known secrets from every line", async () => {
    const h = home();
    const secret = "AIzaSyD-audit-test-secret-0123456789";
    knownSecrets.add(secret);
    const log = new AuditLog(h, { stripParams: ["key"] });
    log.record({
      decision: "blocked",
      method: "GET",
      host: "evil.example",
      path: `/collect?key=${secret}&q=1&api_key=x`,
      code: "placeholder_host_mismatch",
      reason: `upstream said: invalid key ${secret}`,
      stripParams: ["api_key"],
    });
    await log.close();
    const text = readFileSync(currentAuditFile(h), "utf8");
    expect(text).not.toContain(secret);
    const [rec] = records(currentAuditFile(h));
    expect(rec!.path).toBe("/collect?key=[REDACTED]&q=1&api_key=[REDACTED]");
    expect(rec!.reason).toBe("upstream said: invalid key [REDACTED]");
    expect((await verifyAudit(h)).ok).toBe(true);
  });

  it("only queues in record(): the line is written in the background, and close() flushes all", async () => {
    const h = home();
    const log = new AuditLog(h);
    for (let i = 0; i < 500; i++) log.record({ decision: "passthrough", host: `h${i}.example` });
    expect(log.pending).toBe(500);
    expect(existsSync(currentAuditFile(h))).toBe(false);
    await log.close();
    expect(log.pending).toBe(0);
    const recs = records(currentAuditFile(h));
    expect(recs.map((r) => r.host)).toEqual(Array.from({ length: 500 }, (_, i) => `h${i}.example`));
  });

  it("writes each line's time as toISOString does, milliseconds padded, across seconds and days", async () => {
    const h = home();
    const log = new AuditLog(h);
    const base = Date.UTC(2026, 10, 27, 23, 59, 59, 0);
    const times = [
      base,
      base + 7,
      base + 70,
      base + 700,
      base + 999,
      base + 1000,
      base + 1005,
      base + 1000,
      0,
    ];
    for (const time of times) log.record({ decision: "passthrough", time });
    // A time with a fraction of a millisecond is not one the per-second prefix can hold.
    log.record({ decision: "passthrough", time: base + 0.5 });
    await log.close();
    expect(records(currentAuditFile(h)).map((r) => r.time)).toEqual(
      [...times, base + 0.5].map((t) => new Date(t).toISOString()),
    );
    expect((await verifyAudit(h)).ok).toBe(true);
  });

  it("writes again after close(), continuing the chain", async () => {
    const h = home();
    const log = new AuditLog(h);
    log.record({ decision: "reload", reason: "rules changed" });
    await log.close();
    log.record({ decision: "reset", provider: "openai" });
    await log.close();
    expect(lines(currentAuditFile(h))).toHaveLength(2);
    expect((await verifyAudit(h)).ok).toBe(true);
  });

  it("continues the chain across restarts", async () => {
    const h = home();
    await writeEntries(h, 2);
    const last = records(currentAuditFile(h))[1]!;
    await writeEntries(h, 2);
    const recs = records(currentAuditFile(h));
    expect(recs).toHaveLength(4);
    expect(recs[2]!.prev).toBe(last.hash);
    expect(await verifyAudit(h)).toMatchObject({ ok: true, lines: 4 });
  });

  it("keeps the chain when another writer appended in between", async () => {
    const h = home();
    const a = new AuditLog(h);
    const b = new AuditLog(h);
    a.record({ decision: "reload" });
    await a.flush();
    b.record({ decision: "login", provider: "codex-oauth" });
    await b.flush();
    a.record({ decision: "reset", provider: "openai" });
    await a.close();
    await b.close();
    expect(await verifyAudit(h)).toMatchObject({ ok: true, lines: 3 });
  });

  it("cuts off a line left half-written by a crash, warns, and records it with a gap line", async () => {
    const h = home();
    await writeEntries(h, 2);
    const path = currentAuditFile(h);
    writeFileSync(path, readFileSync(path, "utf8") + '{"time":"2026-01-01T00:00:00.000Z","decis', {
      flag: "w",
    });
    const warnings: string[] = [];
    await writeEntries(h, 1, { onWarn: (m) => warnings.push(m) });
    expect(warnings).toEqual([expect.stringContaining("a torn last line (41 bytes, no newline) was cut")]);
    expect(records(path).map((r) => r.decision)).toEqual(["injected", "injected", "gap", "injected"]);
    expect(records(path)[2]).toMatchObject({ lost: 1, reason: expect.stringContaining("torn last line") });
    expect(await verifyAudit(h)).toMatchObject({ ok: true, lines: 4, gaps: [{ line: 3, lost: 1 }] });
  });
});

/** A write that fails with ENOSPC while `full.now`; `partial` bytes are written first, once. */
function fullDisk(full: { now: boolean; partial?: number }): AuditLogOptions["write"] {
  return async (fh, buf, offset, length) => {
    if (full.now) {
      if (full.partial !== undefined && full.partial > 0) {
        const n = Math.min(full.partial, length);
        full.partial = 0;
        return (await fh.write(buf, offset, n)).bytesWritten;
      }
      throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
    }
    return (await fh.write(buf, offset, length)).bytesWritten;
  };
}

const entry = (i: number) =>
  ({ decision: "injected", provider: "openai", path: `/v1/x?n=${i}`, status: 200 }) as const;

describe("a line's text (decision 181)", () => {
  const awkward = [
    "plain",
    "",
    'quote " and backslash \\',
    "tab\tnewline\ncontrol\u0001\u001f del\u007f",
    "emoji 😀 and 日本語 and é",
    "lone \ud800 high, lone \udc00 low, reversed \udc00\ud800",
    "line separators \u2028\u2029",
    "</script><!-- -->",
  ];

  it("writes every field as JSON.stringify does: escapes, surrogates, numbers that are not finite", () => {
    for (const s of awkward) expect(jsonValue(s)).toBe(JSON.stringify(s));
    for (const n of [0, -0, 1.5, 200, 1e21, 1e-7, Number.NaN, Number.POSITIVE_INFINITY])
      expect(jsonValue(n)).toBe(JSON.stringify(n));
    // Every string field, in the order the line has them.
    const strings = (s: string) => ({
      client: s,
      launch: s,
      provider: s,
      credential: s,
      fingerprint: s,
      method: s,
      host: s,
      path: `/p${s}`,
    });
    for (const s of awkward) {
      const entry = {
        decision: "blocked" as const,
        ...strings(s),
        status: 403,
        bytesIn: 0,
        bytesOut: Number.NaN,
        durationMs: 1.23456,
        code: s,
        reason: s,
        lost: 2,
        first: s,
        last: s,
        time: 1_764_201_600_123,
      };
      const expected = {
        time: "2025-11-27T00:00:00.123Z",
        decision: "blocked",
        ...strings(s),
        status: 403,
        bytes_in: 0,
        bytes_out: null,
        duration_ms: 1.235,
        code: s,
        reason: s,
        lost: 2,
        first: s,
        last: s,
      };
      expect(serialize(entry, 0, [], new Scrubber())).toBe(JSON.stringify(expected));
    }
  });

  it("escapes a field that needs it when every other field is plain (one look covers them all)", () => {
    const fields = LINE_STRING_FIELDS;
    // Halves of a surrogate pair in two neighbouring fields: each alone is a lone surrogate.
    const cases: [string, string][] = [
      ...fields.flatMap((f) => awkward.map((s): [string, string] => [f, s])),
      ["client", "a\ud800"],
      ["launch", "\udc00b"],
    ];
    for (const [field, value] of cases) {
      const entry: Record<string, unknown> = { decision: "injected", time: 1_764_201_600_123 };
      for (const f of fields) entry[f] = f === "path" ? "/plain" : "plain";
      entry[field] = field === "path" ? `/p${value}` : value;
      if (field === "client" && value === "a\ud800") entry.launch = "\udc00b";
      const expected: Record<string, unknown> = { time: "2025-11-27T00:00:00.123Z", decision: "injected" };
      for (const f of ["client", "launch", "provider", "credential", "fingerprint", "method", "host", "path"])
        expected[f] = entry[f];
      expected.code = entry.code;
      expected.reason = entry.reason;
      expect(serialize(entry as never, 0, [], new Scrubber())).toBe(JSON.stringify(expected));
    }
  });

  it("verifies lines that hold U+2028 and U+2029, which JSON leaves as they are", async () => {
    // Node 24's readline ended a line at them too: a sound log read as broken there.
    const h = home();
    const log = new AuditLog(h);
    for (const reason of ["a\u2028b", "\u2029", "x\u2028\u2029y"])
      log.record({ decision: "blocked", reason });
    await log.close();
    expect(await verifyAudit(h)).toMatchObject({ ok: true, lines: 3 });
  });

  it("keeps whole lines and the chain across batches of long, short and multi-byte lines", async () => {
    const h = home();
    const log = new AuditLog(h);
    const reasons: string[] = [];
    // Batches that grow the buffer, then shorter ones that reuse it, with 3- and 4-byte characters.
    for (const [n, len] of [
      [400, 900],
      [3, 10],
      [2000, 50],
      [1, 5000],
      [50, 0],
    ] as const) {
      for (let i = 0; i < n; i++) {
        const reason = `${"日😀x".repeat(len / 4)}${i}${awkward[i % awkward.length]}`;
        reasons.push(reason);
        log.record({ decision: "blocked", reason });
      }
      await log.flush();
    }
    await log.close();
    const recs = records(currentAuditFile(h));
    expect(recs.map((r) => r.reason)).toEqual(reasons.map((r) => JSON.parse(JSON.stringify(r))));
    expect(await verifyAudit(h)).toMatchObject({ ok: true, lines: reasons.length });
  });
});

describe("writes that fail are never silent", () => {
  it("continues a short write from where it stopped", async () => {
    const h = home();
    const calls: number[] = [];
    await writeEntries(h, 20, {
      write: async (fh, buf, offset, length) => {
        calls.push(length);
        return (await fh.write(buf, offset, Math.min(length, 37))).bytesWritten;
      },
    });
    expect(calls.length).toBeGreaterThan(20);
    expect(await verifyAudit(h)).toMatchObject({ ok: true, lines: 20, gaps: [] });
  });

  it("reports a failing disk once, counts what is lost, and records it with a gap line when writing resumes", async () => {
    const h = home();
    const full = { now: false, partial: 300 };
    const errors: Error[] = [];
    const resumed: unknown[] = [];
    const log = new AuditLog(h, {
      write: fullDisk(full),
      onError: (e) => errors.push(e),
      onResume: (g) => resumed.push(g),
    });
    for (let i = 0; i < 3; i++) log.record(entry(i));
    await log.flush();
    full.now = true;
    for (let i = 3; i < 10; i++) log.record(entry(i));
    await log.flush();
    for (let i = 10; i < 15; i++) log.record(entry(i));
    await log.flush();
    expect(errors).toHaveLength(1);
    expect(errors[0]!.message).toContain("ENOSPC");
    expect(log.writable).toBe(false);
    const health = log.health();
    expect(health).toMatchObject({ writing: false, error: expect.stringContaining("ENOSPC") });
    // 300 bytes of the first failing batch were written: whole lines among them are kept.
    const kept = lines(currentAuditFile(h)).length;
    expect(kept).toBeGreaterThanOrEqual(3);
    expect(health.lost).toBe(15 - kept);

    full.now = false;
    for (let i = 15; i < 17; i++) log.record(entry(i));
    await log.close();
    expect(log.writable).toBe(true);
    expect(resumed).toEqual([expect.objectContaining({ lost: 15 - kept })]);
    const recs = records(currentAuditFile(h));
    expect(recs.map((r) => r.decision)).toEqual([
      ...Array(kept).fill("injected"),
      "gap",
      "injected",
      "injected",
    ]);
    expect(recs[kept]).toMatchObject({
      lost: 15 - kept,
      first: expect.any(String),
      last: expect.any(String),
    });
    expect(recs[kept]!.first! <= recs[kept]!.last!).toBe(true);
    const verified = await verifyAudit(h);
    expect(verified).toMatchObject({
      ok: true,
      lines: kept + 3,
      gaps: [{ line: kept + 1, lost: 15 - kept }],
    });
    // Every event is accounted for: written, or counted in the gap.
    expect(kept + (recs[kept]!.lost ?? 0) + 2).toBe(17);
  });

  it("writes the gap line by itself once the disk has room again, without new events", async () => {
    const h = home();
    const full = { now: true };
    let resume!: (g: unknown) => void;
    const resumed = new Promise((r) => {
      resume = r;
    });
    const log = new AuditLog(h, { write: fullDisk(full), onError: () => {}, onResume: (g) => resume(g) });
    log.record(entry(0));
    await log.flush();
    expect(log.writable).toBe(false);
    full.now = false;
    expect(await resumed).toMatchObject({ lost: 1 });
    await log.close();
    expect(records(currentAuditFile(h)).map((r) => r.decision)).toEqual(["gap"]);
  });
});

describe("rotation", () => {
  it("rotates at the size cap, keeps `keep` files, and carries the chain across them", async () => {
    const h = home();
    const maxBytes = 2000;
    await writeEntries(h, 60, { maxBytes, keep: 3 });
    const files = listAuditFiles(h);
    expect(files.map((f) => f.slice(auditDir(h).length + 1))).toEqual([
      "audit.3.jsonl",
      "audit.2.jsonl",
      "audit.1.jsonl",
      "audit.jsonl",
    ]);
    expect(existsSync(rotatedAuditFile(h, 4))).toBe(false);
    for (const f of files) expect(statSync(f).size).toBeLessThanOrEqual(maxBytes);
    // The first line of each newer file links to the last line of the file before it.
    for (let i = 1; i < files.length; i++) {
      const older = records(files[i - 1]!);
      expect(records(files[i]!)[0]!.prev).toBe(older[older.length - 1]!.hash);
    }
    // The newest line is the last entry written.
    const current = records(currentAuditFile(h));
    expect(current[current.length - 1]!.path).toBe("/v1/chat/completions?n=59");
    const result = await verifyAudit(h);
    const kept = files.reduce((n, f) => n + lines(f).length, 0);
    expect(result).toMatchObject({ ok: true, lines: kept, fromGenesis: false });
  });

  it("continues after a restart whose current file was just rotated away", async () => {
    const h = home();
    await writeEntries(h, 10, { maxBytes: 1500 });
    const rotated = records(rotatedAuditFile(h, 1));
    writeFileSync(currentAuditFile(h), "");
    await writeEntries(h, 1, { maxBytes: 1500 });
    expect(records(currentAuditFile(h))[0]!.prev).toBe(rotated[rotated.length - 1]!.hash);
    expect((await verifyAudit(h)).ok).toBe(true);
  });

  it("names the first line of the next file when a rotated file is missing", async () => {
    const h = home();
    await writeEntries(h, 40, { maxBytes: 1500, keep: 5 });
    rmSync(rotatedAuditFile(h, 2));
    const result = await verifyAudit(h);
    expect(result).toMatchObject({ ok: false, file: rotatedAuditFile(h, 1), line: 1 });
  });
});

describe("verifyAudit names the first bad line", () => {
  async function tampered(edit: (ls: string[]) => string[]) {
    const h = home();
    await writeEntries(h, 6);
    const path = currentAuditFile(h);
    writeFileSync(path, edit(lines(path)).join("\n") + "\n");
    return { h, path, result: await verifyAudit(h) };
  }

  it("an edited line", async () => {
    const { path, result } = await tampered((ls) =>
      ls.map((l, i) => (i === 2 ? l.replace('"status":200', '"status":201') : l)),
    );
    expect(result).toMatchObject({ ok: false, file: path, line: 3, lines: 2 });
    if (!result.ok) expect(result.problem).toMatch(/changed/);
  });

  it("an edited last line", async () => {
    const { result } = await tampered((ls) =>
      ls.map((l, i) => (i === 5 ? l.replace('"client":"default"', '"client":"cron"') : l)),
    );
    expect(result).toMatchObject({ ok: false, line: 6 });
  });

  it("a deleted line", async () => {
    const { result } = await tampered((ls) => ls.filter((_, i) => i !== 3));
    expect(result).toMatchObject({ ok: false, line: 4 });
    if (!result.ok) expect(result.problem).toMatch(/removed, inserted or reordered/);
  });

  it("reordered lines", async () => {
    const { result } = await tampered((ls) => [ls[0]!, ls[2]!, ls[1]!, ...ls.slice(3)]);
    expect(result).toMatchObject({ ok: false, line: 2 });
  });

  it("an inserted copy of a valid line", async () => {
    const { result } = await tampered((ls) => [...ls.slice(0, 4), ls[1]!, ...ls.slice(4)]);
    expect(result).toMatchObject({ ok: false, line: 5 });
  });

  it("an inserted forged line", async () => {
    const { result } = await tampered((ls) => [...ls.slice(0, 2), '{"decision":"injected"}', ...ls.slice(2)]);
    expect(result).toMatchObject({ ok: false, line: 3 });
  });

  it("an empty line", async () => {
    const { result } = await tampered((ls) => [...ls.slice(0, 2), "", ...ls.slice(2)]);
    expect(result).toMatchObject({ ok: false, line: 3 });
  });

  it("an empty home is intact with zero lines", async () => {
    expect(await verifyAudit(home())).toMatchObject({ ok: true, lines: 0, files: [] });
  });
});

describe("stripQuery", () => {
  it("removes only the named parameters' values", () => {
    expect(stripQuery("/v1/models?key=abc&alt=sse", ["key"])).toBe("/v1/models?key=[REDACTED]&alt=sse");
    expect(stripQuery("/v1/models?alt=sse&%6Bey=abc#frag", ["key"])).toBe(
      "/v1/models?alt=sse&%6Bey=[REDACTED]#frag",
    );
    expect(stripQuery("/v1/models?keys=abc&key", ["key"])).toBe("/v1/models?keys=abc&key");
    expect(stripQuery("/v1/models", ["key"])).toBe("/v1/models");
    expect(stripQuery("/v1/models?key=abc", [])).toBe("/v1/models?key=abc");
  });
});
