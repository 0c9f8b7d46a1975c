// The local sources: `.env` files (through dotenv) and secret files.
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseRules } from "../../../rules/load.js";
import { DotenvSource } from "../../../secrets/dotenv-source.js";
import { FileSource } from "../../../secrets/file-source.js";
import { createSecretResolver, dotenvCandidates } from "../../../secrets/sources.js";

function dir(): string {
  return mkdtempSync(join(tmpdir(), "kb-local-"));
}

describe("dotenv", () => {
  const text = [
    "# a comment line",
    "export EXPORTED=exported-value",
    'DOUBLE="double quoted # not a comment"',
    "SINGLE='single $NOT_EXPANDED'",
    "BACKTICK=`back tick`",
    "INLINE=plain-value # a trailing comment",
    'MULTI="-----BEGIN KEY-----',
    "line two",
    '-----END KEY-----"',
    'ESCAPED="a\\nb"',
    "  SPACED  =  spaced-value  ",
    "EMPTY=",
    "CRLF=crlf-value\r",
    "",
  ].join("\n");

  it.each([
    ["EXPORTED", "exported-value"],
    ["DOUBLE", "double quoted # not a comment"],
    ["SINGLE", "single $NOT_EXPANDED"],
    ["BACKTICK", "back tick"],
    ["INLINE", "plain-value"],
    ["MULTI", "-----BEGIN KEY-----\nline two\n-----END KEY-----"],
    ["ESCAPED", "a\nb"],
    ["SPACED", "spaced-value"],
    ["CRLF", "crlf-value"],
  ])("reads %s", async (key, value) => {
    const d = dir();
    writeFileSync(join(d, ".env"), text);
    expect(await new DotenvSource([join(d, ".env")]).lookup(key)).toEqual({ kind: "found", value });
  });

  it("tells empty from missing", async () => {
    const d = dir();
    writeFileSync(join(d, ".env"), text);
    const source = new DotenvSource([join(d, ".env")]);
    expect(await source.lookup("EMPTY")).toEqual({ kind: "empty" });
    expect(await source.lookup("NOWHERE")).toEqual({ kind: "missing" });
    expect(await new DotenvSource([join(d, "absent.env")]).lookup("EMPTY")).toEqual({ kind: "missing" });
  });

  it("asks ./.env then $KEYBROKER_HOME/.env, the second when the first has no value", async () => {
    const cwd = dir();
    const home = dir();
    writeFileSync(join(cwd, ".env"), "A=from-cwd\nB=\n");
    writeFileSync(join(home, ".env"), "A=from-home\nB=b-from-home\nC=c-from-home\n");
    const rules = parseRules("version: 1\n", "test.yaml", "/");
    const candidates = dotenvCandidates(rules, { env: {}, home, cwd, warn: () => {} });
    expect(candidates).toEqual([join(cwd, ".env"), join(home, ".env")]);
    const source = new DotenvSource(candidates);
    expect(await source.lookup("A")).toEqual({ kind: "found", value: "from-cwd" });
    expect(await source.lookup("B")).toEqual({ kind: "found", value: "b-from-home" });
    expect(await source.lookup("C")).toEqual({ kind: "found", value: "c-from-home" });
  });

  it("uses sources.dotenv alone when it is set, relative to the rule file", async () => {
    const d = dir();
    mkdirSync(join(d, "conf"));
    // Resolving registers the value as a secret for this process's scrubbing (the test files of
    // a worker share it): a value no other test writes.
    writeFileSync(join(d, "conf", "secrets.env"), "K=configured-in-the-rule-files-folder\n");
    const rules = parseRules(
      "version: 1\nsources: { dotenv: ./secrets.env }\n",
      join(d, "conf", "k.yaml"),
      join(d, "conf"),
    );
    expect(dotenvCandidates(rules, { env: {}, home: d, cwd: d, warn: () => {} })).toEqual([
      join(d, "conf", "secrets.env"),
    ]);
    const r = createSecretResolver(rules, { env: {}, home: d, cwd: d, warn: () => {} });
    expect((await r.resolve("dotenv:K")).secret?.reveal()).toBe("configured-in-the-rule-files-folder");
  });

  it("reads a file replaced by an editor (new inode, same size)", async () => {
    const d = dir();
    const path = join(d, ".env");
    writeFileSync(path, "K=value-one\n");
    const source = new DotenvSource([path]);
    expect(await source.lookup("K")).toEqual({ kind: "found", value: "value-one" });
    writeFileSync(join(d, ".env.tmp"), "K=value-two\n");
    const { renameSync } = await import("node:fs");
    renameSync(join(d, ".env.tmp"), path);
    expect(await source.lookup("K")).toEqual({ kind: "found", value: "value-two" });
  });
});

describe("file", () => {
  it("trims one trailing newline and keeps the rest", async () => {
    const d = dir();
    writeFileSync(join(d, "a"), "value-a\n", { mode: 0o600 });
    writeFileSync(join(d, "b"), "value-b\r\n", { mode: 0o600 });
    writeFileSync(join(d, "c"), "  value-c\n\n", { mode: 0o600 });
    const source = new FileSource();
    expect(await source.lookup(join(d, "a"))).toEqual({ kind: "found", value: "value-a" });
    expect(await source.lookup(join(d, "b"))).toEqual({ kind: "found", value: "value-b" });
    expect(await source.lookup(join(d, "c"))).toEqual({ kind: "found", value: "  value-c\n" });
  });

  it("warns once when the group or everyone can read it, never with the value", async () => {
    const d = dir();
    const warnings: string[] = [];
    const source = new FileSource((m) => warnings.push(m));
    for (const [name, mode] of [
      ["private", 0o600],
      ["group", 0o640],
      ["world", 0o604],
    ] as const) {
      writeFileSync(join(d, name), `secret-in-${name}\n`);
      chmodSync(join(d, name), mode);
      await source.lookup(join(d, name));
      await source.lookup(join(d, name));
    }
    expect(warnings).toEqual([
      `secret file ${join(d, "group")} is readable by its group (mode 640): chmod 600 it`,
      `secret file ${join(d, "world")} is readable by every user (mode 604): chmod 600 it`,
    ]);
  });

  it("answers missing for an absent file and an error for a folder", async () => {
    const d = dir();
    const source = new FileSource();
    expect(await source.lookup(join(d, "absent"))).toEqual({ kind: "missing" });
    expect(await source.lookup(d)).toEqual({ kind: "error", message: `${d} is not a file` });
  });
});
