// `keybroker audit verify|tail` and `keybroker redact` as a user runs them: the built CLI, a
// real home, and the secret scan over everything they printed.
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it, onTestFinished } from "vitest";
import { AuditLog, type AuditLogOptions, currentAuditFile } from "../../audit/audit-log.js";
import { writeAuditEntries } from "../helpers/audit.js";
import { baseEnv, CLI, cli, findSecrets, tempHome, writeConfig } from "../helpers/broker.js";

const homes: string[] = [];
function home(): string {
  const h = tempHome();
  homes.push(h);
  return h;
}

const REAL_KEYS = [
  "sk-real-openai-7f3a9c1e5b2d4f60a8e1c3b5d7f9a2c4",
  // Shaped like nothing: only the configured source knows it is a secret.
  "plain-Secret-Value-no-known-shape-4711",
  "dotenv-only-Value-0815-zyxw",
];

afterAll(() => {
  expect(findSecrets(REAL_KEYS, homes)).toEqual([]);
});

/** n lines, every other one a blocked request. */
const writeAudit = (h: string, n: number, opts: AuditLogOptions = {}) =>
  writeAuditEntries(h, n, opts, (i) =>
    i % 2 === 0
      ? { bytesIn: 10, bytesOut: 20, durationMs: 3 }
      : { decision: "blocked", status: 403, bytesIn: 10, bytesOut: 20, durationMs: 3 },
  );

describe("keybroker audit verify", () => {
  it("exits 0 with the line count when the chain is intact", async () => {
    const h = home();
    await writeAudit(h, 5);
    const r = cli(["audit", "verify", "--home", h]);
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(r.stdout).toContain("audit log intact: 5 line(s) in 1 file(s)");
  });

  it("finds KEYBROKER_HOME in the environment, and an empty home is intact", () => {
    const h = home();
    const r = cli(["audit", "verify"], { env: { KEYBROKER_HOME: h } });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain("0 lines");
  });

  it("exits 1 naming the first changed line", async () => {
    const h = home();
    await writeAudit(h, 5);
    const path = currentAuditFile(h);
    const lines = readFileSync(path, "utf8").split("\n");
    lines[2] = lines[2]!.replace('"status":200', '"status":204');
    writeFileSync(path, lines.join("\n"));
    const r = cli(["audit", "verify", "--home", h]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("audit log broken at audit.jsonl line 3: line was changed");
  });

  it("exits 1 naming the line after a removed one, across rotated files", async () => {
    const h = home();
    await writeAudit(h, 30, { maxBytes: 2000 });
    const rotated = join(h, "audit", "audit.1.jsonl");
    const lines = readFileSync(rotated, "utf8").split("\n");
    writeFileSync(rotated, [...lines.slice(0, 1), ...lines.slice(2)].join("\n"));
    const r = cli(["audit", "verify", "--home", h]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/audit log broken at audit\.1\.jsonl line 2: chain broken/);
  });
});

describe("keybroker audit tail", () => {
  it("prints the last N entries, one readable line each", async () => {
    const h = home();
    await writeAudit(h, 6);
    const r = cli(["audit", "tail", "-n", "2", "--home", h]);
    expect(r.status).toBe(0);
    const out = r.stdout.trim().split("\n");
    expect(out).toHaveLength(2);
    expect(out[0]).toMatch(
      /^\d{4}-\d\d-\d\dT[\d:.]+Z {2}injected {9}default → openai {2}POST api\.openai\.com\/v1\/chat\/completions\?n=4 {2}200/,
    );
    expect(out[1]).toMatch(/blocked .*\?n=5 {2}403 {2}credential OPENAI_API_KEY$/);
    // Ten by default.
    expect(cli(["audit", "tail", "--home", h]).stdout.trim().split("\n")).toHaveLength(6);
  });

  it("prints the raw lines with --json", async () => {
    const h = home();
    await writeAudit(h, 3);
    const r = cli(["audit", "tail", "--json", "--home", h]);
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(readFileSync(currentAuditFile(h), "utf8"));
  });

  it("follows new lines with -f, across rotation, until interrupted", async () => {
    const h = home();
    await writeAudit(h, 3, { maxBytes: 1500 });
    const child = spawn(process.execPath, [CLI, "audit", "tail", "-f", "--json", "-n", "1", "--home", h], {
      env: baseEnv(),
    });
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
    // A failed expectation must not leave the follower running.
    onTestFinished(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    });
    let out = "";
    const waiters: { test: () => boolean; resolve: () => void }[] = [];
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
      for (const w of waiters.splice(0)) {
        if (w.test()) w.resolve();
        else waiters.push(w);
      }
    });
    const until = (test: () => boolean) =>
      new Promise<void>((resolve) => (test() ? resolve() : waiters.push({ test, resolve })));
    const count = () => out.split("\n").filter((l) => l !== "").length;
    await until(() => count() >= 1);
    const log = new AuditLog(h, { maxBytes: 1500 });
    for (let i = 0; i < 20; i++) log.record({ decision: "passthrough", host: `h${i}.example`, status: 200 });
    await log.close();
    await until(() => count() >= 21);
    child.kill("SIGINT");
    expect(await exited).toBe(0);
    const hosts = out
      .trim()
      .split("\n")
      .map((l) => (JSON.parse(l) as { host: string }).host);
    expect(hosts).toEqual(["api.openai.com", ...Array.from({ length: 20 }, (_, i) => `h${i}.example`)]);
    expect(cli(["audit", "verify", "--home", h]).status).toBe(0);
  });

  it("gives usage errors exit 2", () => {
    for (const args of [
      ["audit"],
      ["audit", "frobnicate"],
      ["audit", "verify", "-f"],
      ["audit", "tail", "-n", "many"],
      ["audit", "tail", "extra"],
      ["audit", "tail", "--no-such-flag"],
    ]) {
      const r = cli(args);
      expect(r.status, args.join(" ")).toBe(2);
      expect(r.stderr, args.join(" ")).toContain("keybroker audit --help");
    }
  });
});

describe("keybroker redact", () => {
  it("masks known values from the configured sources and secret-shaped strings, stdin → stdout", () => {
    const h = home();
    // The user's own folder (its .env holds a real value): not part of the scan of what we wrote.
    const dir = tempHome();
    writeFileSync(join(dir, ".env"), `DOTENV_ONLY_KEY=${REAL_KEYS[2]}\n`);
    const config = writeConfig(
      dir,
      [
        "version: 1",
        "providers:",
        "  internal:",
        "    hosts: [api.internal.example]",
        "    inject: { header: authorization }",
        "    credentials: [INTERNAL_TOKEN, DOTENV_ONLY_KEY]",
        "",
      ].join("\n"),
    );
    const input = [
      '$ curl -H "Authorization: Bearer sk-kb-kbph-0123456789ABCDEFGHIJabcdefghijkl" https://api.internal.example',
      `{"error": "invalid token ${REAL_KEYS[1]}"}`,
      `dotenv said ${REAL_KEYS[2]}`,
      `OPENAI_API_KEY=${REAL_KEYS[0]}`,
      "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",
      "commit 3f2c1e8d9b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e is fine",
      "",
    ].join("\n");
    const r = cli(["redact", "--home", h, "--config", config], {
      input,
      cwd: dir,
      env: { INTERNAL_TOKEN: REAL_KEYS[1]! },
    });
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(
      [
        // A placeholder is not a secret: the command the agent ran stays readable.
        '$ curl -H "Authorization: Bearer sk-kb-kbph-0123456789ABCDEFGHIJabcdefghijkl" https://api.internal.example',
        '{"error": "invalid token [REDACTED]"}',
        "dotenv said [REDACTED]",
        "OPENAI_API_KEY=sk-[REDACTED]",
        "SG.[REDACTED]",
        "commit 3f2c1e8d9b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e is fine",
        "",
      ].join("\n"),
    );
  });

  it("streams: each line comes out before the input ends", async () => {
    const h = home();
    const child = spawn(process.execPath, [CLI, "redact", "--home", h], { env: baseEnv(), cwd: h });
    onTestFinished(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    });
    const first = new Promise<string>((resolve) =>
      child.stdout.once("data", (d: Buffer) => resolve(d.toString())),
    );
    child.stdin.write(`token=${REAL_KEYS[0]}\n`);
    expect(await first).toBe("token=sk-[REDACTED]\n");
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
    child.stdin.end("last line");
    expect(await exited).toBe(0);
  });

  it("reports a bad rule file with exit 1 and a stray argument with exit 2", () => {
    const dir = home();
    const bad = writeConfig(dir, "version: 1\nproviders:\n  x: { hosts: [api.x.example], nope: 1 }\n");
    expect(cli(["redact", "--config", bad, "--home", dir]).status).toBe(1);
    expect(cli(["redact", "file.txt"]).status).toBe(2);
  });
});

describe("--help", () => {
  it("documents the flags and KEYBROKER_HOME", () => {
    const audit = cli(["audit", "--help"]);
    expect(audit.status).toBe(0);
    for (const word of ["Usage: keybroker audit", "verify", "tail", "-f", "--json", "-n", "KEYBROKER_HOME"]) {
      expect(audit.stdout).toContain(word);
    }
    const redact = cli(["redact", "--help"]);
    expect(redact.status).toBe(0);
    for (const word of ["Usage: keybroker redact", "--config", "KEYBROKER_HOME", "SG.<id>.<secret>"]) {
      expect(redact.stdout).toContain(word);
    }
    const top = cli(["--help"]).stdout;
    expect(top).toMatch(/ redact /);
    expect(top).toMatch(/ audit /);
  });
});
