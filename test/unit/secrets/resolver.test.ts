import { chmodSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { DotenvSource } from "../../../secrets/dotenv-source.js";
import { EnvSource } from "../../../secrets/env-source.js";
import { FileSource } from "../../../secrets/file-source.js";
import { parseRef, SecretResolver } from "../../../secrets/resolver.js";
import type { SecretSource } from "../../../secrets/source.js";

function dir(): string {
  return mkdtempSync(join(tmpdir(), "kb-secrets-"));
}

function resolver(env: Record<string, string>, dotenvPath: string, order = ["dotenv", "env"]) {
  const sources = new Map<string, SecretSource>([
    ["env", new EnvSource(env)],
    ["dotenv", new DotenvSource([dotenvPath])],
    ["file", new FileSource()],
  ]);
  return new SecretResolver({ sources, order, ttlMs: 0 });
}

describe("SecretResolver", () => {
  it("falls back to the environment when an earlier source has nothing or an empty value", async () => {
    const d = dir();
    writeFileSync(join(d, ".env"), "EMPTY_KEY=\nOTHER=1\n");
    const r = resolver({ EMPTY_KEY: "from-env", MISSING_KEY: "also-env" }, join(d, ".env"));
    const a = await r.resolve("EMPTY_KEY");
    expect(a.secret?.reveal()).toBe("from-env");
    expect(a.attempts.map((x) => `${x.source}:${x.outcome}`)).toEqual(["dotenv:empty", "env:found"]);
    const b = await r.resolve("MISSING_KEY");
    expect(b.attempts.map((x) => `${x.source}:${x.outcome}`)).toEqual(["dotenv:missing", "env:found"]);
  });

  it("always ends the chain with the environment", () => {
    expect(resolver({}, "/nonexistent/.env", ["dotenv"]).order).toEqual(["dotenv", "env"]);
  });

  it("prefers .env over the environment in the default order, and sees edits", async () => {
    const d = dir();
    const path = join(d, ".env");
    writeFileSync(path, 'export KEY="v1"\n# comment\n');
    const r = resolver({ KEY: "env-value" }, path);
    expect((await r.resolve("KEY")).secret?.reveal()).toBe("v1");
    writeFileSync(path, "KEY='v2-longer'\n");
    expect((await r.resolve("KEY")).secret?.reveal()).toBe("v2-longer");
  });

  it("reads file: references with the trailing newline trimmed and warns about loose modes", async () => {
    const d = dir();
    const path = join(d, "secret");
    writeFileSync(path, "file-secret\n");
    chmodSync(path, 0o644);
    const warnings: string[] = [];
    const sources = new Map<string, SecretSource>([
      ["file", new FileSource((m) => warnings.push(m))],
      ["env", new EnvSource({})],
    ]);
    const r = new SecretResolver({ sources, order: ["env"] });
    const res = await r.resolve(`file:${path}`);
    expect(res.secret?.reveal()).toBe("file-secret");
    expect(res.secret?.source).toBe("file");
    expect(warnings.join()).toContain("chmod 600");
    expect(warnings.join()).not.toContain("file-secret");
  });

  it("never shows the value in JSON or inspect output", async () => {
    const r = resolver({ KEY: "super-secret-value" }, "/nonexistent/.env");
    const s = (await r.resolve("KEY")).secret!;
    expect(JSON.stringify(s)).not.toContain("super-secret-value");
    expect(String(s)).not.toContain("super-secret-value");
    const { inspect } = await import("node:util");
    expect(inspect(s)).not.toContain("super-secret-value");
  });

  it("parses references", () => {
    expect(parseRef("OPENAI_API_KEY")).toEqual({ source: undefined, key: "OPENAI_API_KEY" });
    expect(parseRef("env:X")).toEqual({ source: "env", key: "X" });
    expect(parseRef("file:/run/s")).toEqual({ source: "file", key: "/run/s" });
  });
});
