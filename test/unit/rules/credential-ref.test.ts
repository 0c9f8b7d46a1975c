import { describe, expect, it } from "vitest";
import { absoluteCredentialRef, parseCredentialRef } from "../../../rules/credential-ref.js";
import { editDistance, formatPath, suggest } from "../../../rules/errors.js";
import { parseByteSize, parseDuration } from "../../../rules/units.js";

describe("parseCredentialRef", () => {
  it.each([
    ["OPENAI_API_KEY", { kind: "name", name: "OPENAI_API_KEY" }],
    ["env:A", { kind: "env", name: "A" }],
    ["dotenv:_B2", { kind: "dotenv", name: "_B2" }],
    ["file:~/keys/sa.json", { kind: "file", path: "~/keys/sa.json" }],
    ["infisical:/llm/ANTHROPIC_API_KEY", { kind: "infisical", folder: "/llm", name: "ANTHROPIC_API_KEY" }],
    ["infisical:/a/b/C-D", { kind: "infisical", folder: "/a/b", name: "C-D" }],
    ["infisical:/ROOT", { kind: "infisical", folder: "/", name: "ROOT" }],
    ["cmd:op read op://vault/openai/key", { kind: "cmd", command: "op read op://vault/openai/key" }],
  ])("%s", (ref, parsed) => {
    expect(parseCredentialRef(ref)).toEqual(parsed);
  });

  it("does not repeat a rejected value", () => {
    const value = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz";
    expect(() => parseCredentialRef(value)).toThrow("value not shown");
    try {
      parseCredentialRef(value);
    } catch (err) {
      expect((err as Error).message).not.toContain(value);
    }
  });

  it("makes file paths absolute", () => {
    expect(absoluteCredentialRef("file:k/x", "/etc/kb", "/home/u")).toBe("file:/etc/kb/k/x");
    expect(absoluteCredentialRef("file:~/x", "/etc/kb", "/home/u")).toBe("file:/home/u/x");
    expect(absoluteCredentialRef("file:/a/../b", "/etc/kb", "/home/u")).toBe("file:/b");
    expect(absoluteCredentialRef("env:X", "/etc/kb", "/home/u")).toBe("env:X");
  });
});

describe("message helpers", () => {
  it("counts a swap of neighbouring letters as one edit", () => {
    expect(editDistance("hedaer", "header")).toBe(1);
    expect(editDistance("", "abc")).toBe(3);
    expect(suggest("hedaer", ["header", "query", "basic", "format"])).toBe("header");
    expect(suggest("zzzz", ["header", "query"])).toBeUndefined();
  });

  it("formats paths", () => {
    expect(formatPath(["providers", "openai", "hosts", 1])).toBe("providers.openai.hosts[1]");
    expect(formatPath(["resolve", "api.openai.com:443"])).toBe('resolve["api.openai.com:443"]');
    expect(formatPath(["providers", "codex-oauth"])).toBe("providers.codex-oauth");
  });
});

describe("units", () => {
  it("reads durations and sizes", () => {
    expect(parseDuration("60s")).toBe(60_000);
    expect(parseDuration(2)).toBe(2000);
    expect(parseDuration("5 minutes")).toBeUndefined();
    expect(parseDuration(-1)).toBeUndefined();
    expect(parseByteSize("4MiB")).toBe(4 * 1024 * 1024);
    expect(parseByteSize(1000)).toBe(1000);
    expect(parseByteSize("1MB")).toBe(1_000_000);
    expect(parseByteSize("lots")).toBeUndefined();
  });
});
