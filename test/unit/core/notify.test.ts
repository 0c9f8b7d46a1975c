// `notify: "cmd:…"` (docs/spec.md §16): one JSON event on the command's stdin, a timeout, failures
// logged without stopping anything, a bounded queue; and the rule-file key that sets it.
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Notifier } from "../../../core/notify.js";
import { parseSnippet, snippetProblems } from "../../helpers/rules.js";

const dir = mkdtempSync(join(tmpdir(), "kb-notify-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function script(name: string, body: string): string {
  const path = join(dir, name);
  writeFileSync(path, `#!/bin/sh\n${body}\n`);
  chmodSync(path, 0o755);
  return path;
}

const parse = parseSnippet;
const problems = snippetProblems;

describe("Notifier", () => {
  it("hands the command one JSON object per event on stdin, with its arguments", async () => {
    const out = join(dir, "events.jsonl");
    const append = script("append.sh", `cat >> "$1"`);
    const warnings: string[] = [];
    const notifier = new Notifier([append, out], { warn: (m) => warnings.push(m) });
    await notifier.notify({ event: "approval_pending", id: "a1", client: "agent" });
    await notifier.notify({ event: "reauth_required", provider: "codex-oauth", credential: "work" });
    const lines = readFileSync(out, "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({ event: "approval_pending", id: "a1", client: "agent" });
    expect(lines[1]).toMatchObject({ event: "reauth_required", provider: "codex-oauth" });
    expect(Date.parse(lines[0].at)).not.toBeNaN();
    expect(warnings).toEqual([]);
  });

  it("logs a failing, a missing and a hanging command, and goes on", async () => {
    const warnings: string[] = [];
    const failing = new Notifier([script("fail.sh", "exit 3")], { warn: (m) => warnings.push(m) });
    await failing.notify({ event: "x" });
    const missing = new Notifier([join(dir, "no-such-command")], { warn: (m) => warnings.push(m) });
    await missing.notify({ event: "x" });
    const hanging = new Notifier([script("hang.sh", "sleep 30")], {
      warn: (m) => warnings.push(m),
      timeoutMs: 300,
    });
    await hanging.notify({ event: "x" });
    expect(warnings).toHaveLength(3);
    expect(warnings[0]).toMatch(/^notify: the command \(.*fail\.sh\) exited with status 3$/);
    expect(warnings[1]).toMatch(/could not be started: .*ENOENT/);
    expect(warnings[2]).toMatch(/did not finish within 0\.3 s and was stopped/);
  });

  it("runs a few at once, queues a bounded number, and drops the rest with one warning", async () => {
    const out = join(dir, "queued.txt");
    const slow = script("slow.sh", `sleep 0.2; cat >> "$1"; echo >> "$1"`);
    const warnings: string[] = [];
    const notifier = new Notifier([slow, out], { warn: (m) => warnings.push(m), concurrency: 2, queue: 3 });
    const sent = Array.from({ length: 8 }, (_, i) => notifier.notify({ event: "burst", n: i }));
    await Promise.all(sent);
    const got = readFileSync(out, "utf8")
      .split("\n")
      .filter((l) => l.startsWith("{"));
    expect(got).toHaveLength(5);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/dropping "burst"/);
  });

  it("notifies nobody without a command, and follows a new one", async () => {
    const out = join(dir, "later.jsonl");
    const notifier = new Notifier(undefined, { warn: () => {} });
    expect(notifier.configured).toBe(false);
    await notifier.notify({ event: "lost" });
    notifier.setCommand([script("later.sh", `cat >> "$1"`), out]);
    await notifier.notify({ event: "kept" });
    expect(readFileSync(out, "utf8")).toMatch(/^\{"event":"kept"/);
  });
});

describe("notify in the rule file", () => {
  it("compiles a cmd: reference to an argv, without a shell's expansions", () => {
    expect(parse(`notify: "cmd:/usr/bin/chat-notify --room 'ops team' $HOME"\n`).notify).toEqual([
      "/usr/bin/chat-notify",
      "--room",
      "ops team",
      "$HOME",
    ]);
    expect(parse("").notify).toBeUndefined();
  });

  it("refuses anything but a cmd: reference, naming the path", () => {
    expect(problems("notify: https://hooks.example.com/x\n")).toEqual([
      'notify: must start with "cmd:", e.g. "cmd:/usr/local/bin/notify-chat --channel ops"',
    ]);
    expect(problems('notify: "cmd:   "\n')).toEqual([
      'notify: names no command: write the program and its arguments after "cmd:"',
    ]);
    expect(problems("notify: [a]\n")[0]).toMatch(/^notify: /);
  });
});
