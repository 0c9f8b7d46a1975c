// The `cmd` source: an argv run without a shell, stdout as the secret, a timeout, and errors
// that name the command but never what it printed.
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { splitCommandLine } from "../../../core/command-line.js";
import { CmdSource } from "../../../secrets/cmd-source.js";
import { findSecrets } from "../../helpers/broker.js";

const SECRET = "op-secret-value-7c1e9a3b5d2f4680";
const NODE = JSON.stringify(process.execPath);

function dir(): string {
  return mkdtempSync(join(tmpdir(), "kb-cmd-"));
}

/** A node script as a cmd: reference's command line. */
function script(path: string, code: string): string {
  writeFileSync(path, code);
  return `${NODE} ${JSON.stringify(path)}`;
}

function source(opts: { timeoutMs?: number; now?: () => number; warn?: (m: string) => void } = {}) {
  return new CmdSource({
    env: { PATH: process.env.PATH },
    timeoutMs: opts.timeoutMs ?? 10_000,
    ttlMs: 60_000,
    graceMs: 120_000,
    warn: opts.warn ?? (() => {}),
    ...(opts.now === undefined ? {} : { now: opts.now }),
  });
}

describe("splitCommandLine", () => {
  it.each([
    ["pass show openai", ["pass", "show", "openai"]],
    ["  op   read  'op://vault/item/field'  ", ["op", "read", "op://vault/item/field"]],
    [
      `security find-generic-password -s "my key" -w`,
      ["security", "find-generic-password", "-s", "my key", "-w"],
    ],
    [String.raw`echo a\ b "c \"d\"" 'e\f' ""`, ["echo", "a b", 'c "d"', "e\\f", ""]],
    ["echo $HOME `id` | cat > x", ["echo", "$HOME", "`id`", "|", "cat", ">", "x"]],
  ])("splits %j", (line, argv) => {
    expect(splitCommandLine(line)).toEqual(argv);
  });

  it("rejects an unterminated quote", () => {
    expect(() => splitCommandLine("pass show 'openai")).toThrow("unterminated ' quote");
  });
});

describe("CmdSource", () => {
  it("uses stdout as the secret, trailing newline trimmed", async () => {
    const d = dir();
    const res = await source().lookup(
      script(join(d, "print.js"), `process.stdout.write(${JSON.stringify(`${SECRET}\n`)})`),
    );
    expect(res).toMatchObject({ kind: "found", value: SECRET });
  });

  it("runs without a shell: metacharacters reach the command as plain arguments", async () => {
    const d = dir();
    const line = `${script(join(d, "args.js"), "process.stdout.write(JSON.stringify(process.argv.slice(2)))")} $HOME '*' ; echo x`;
    const res = await source().lookup(line);
    expect(res.kind === "found" ? JSON.parse(res.value) : res).toEqual(["$HOME", "*", ";", "echo", "x"]);
  });

  it("reports a non-zero exit with the command, never its output", async () => {
    const d = dir();
    const code = `console.log(${JSON.stringify(SECRET)}); console.error(${JSON.stringify(SECRET)}); process.exit(3)`;
    const line = script(join(d, "fail.js"), code);
    const res = await source().lookup(line);
    expect(res.kind).toBe("error");
    const message = res.kind === "error" ? res.message : "";
    expect(message).toContain(`the command (cmd:${line}) exited with status 3`);
    expect(message).toContain("run it yourself");
    expect(findSecrets([SECRET], [], [message])).toEqual([]);
  });

  it("stops a command that takes too long, and what it started", async () => {
    const d = dir();
    const pidFile = join(d, "pid");
    const code = `require("fs").writeFileSync(${JSON.stringify(pidFile)}, String(process.pid)); setInterval(() => {}, 1000)`;
    const line = script(join(d, "hang.js"), code);
    const res = await source({ timeoutMs: 500 }).lookup(line);
    expect(res).toMatchObject({ kind: "error" });
    expect(res.kind === "error" ? res.message : "").toContain("did not finish within 500 ms and was stopped");
    if (existsSync(pidFile)) {
      const { readFileSync } = await import("node:fs");
      const pid = Number(readFileSync(pidFile, "utf8"));
      await expect
        .poll(() => {
          try {
            process.kill(pid, 0);
            return "running";
          } catch {
            return "gone";
          }
        })
        .toBe("gone");
    }
  });

  it("says when the command does not exist or the line cannot be split", async () => {
    const missing = await source().lookup("/nonexistent/keybroker-test-bin show openai");
    expect(missing.kind === "error" ? missing.message : "").toContain("not found (check the path, or PATH)");
    const quote = await source().lookup(`pass show "openai`);
    expect(quote.kind === "error" ? quote.message : "").toContain("unterminated");
  });

  it("treats empty output as empty (the chain moves on)", async () => {
    const d = dir();
    expect(await source().lookup(script(join(d, "empty.js"), "process.stdout.write('\\n')"))).toMatchObject({
      kind: "empty",
    });
  });

  it("caches the answer, serves it stale while the command fails, then fails closed", async () => {
    const d = dir();
    const valueFile = join(d, "value");
    const counter = join(d, "count");
    writeFileSync(valueFile, `${SECRET}\n`);
    const code = `const fs = require("fs");
fs.appendFileSync(${JSON.stringify(counter)}, "x");
if (!fs.existsSync(${JSON.stringify(valueFile)})) process.exit(1);
process.stdout.write(fs.readFileSync(${JSON.stringify(valueFile)}));`;
    const line = script(join(d, "read.js"), code);
    let clock = Date.now();
    const warnings: string[] = [];
    const cmd = source({ now: () => clock, warn: (m) => warnings.push(m) });
    expect(await cmd.lookup(line)).toMatchObject({ kind: "found", value: SECRET });
    expect(await cmd.lookup(line)).toMatchObject({ kind: "found", value: SECRET });
    const { readFileSync } = await import("node:fs");
    expect(readFileSync(counter, "utf8")).toBe("x");

    rmSync(valueFile);
    clock += 61_000;
    const stale = await cmd.lookup(line);
    expect(stale).toMatchObject({ kind: "found", value: SECRET });
    expect(stale.kind === "found" ? stale.stale : "").toContain("exited with status 1");
    expect(warnings.join("\n")).toContain("using the value it gave before");

    clock += 121_000;
    const closed = await cmd.lookup(line);
    expect(closed.kind).toBe("error");
    expect(closed.kind === "error" ? closed.message : "").toContain("no longer used");
    expect(findSecrets([SECRET], [], [...warnings, JSON.stringify(closed)])).toEqual([]);
  });
});
