import { chmodSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseRef } from "../../../rules/credential-ref.js";
import { DotenvSource } from "../../../secrets/dotenv-source.js";
import { EnvSource } from "../../../secrets/env-source.js";
import { FileSource } from "../../../secrets/file-source.js";
import { describeAttempts, SecretResolver } from "../../../secrets/resolver.js";
import type { Lookup, SecretSource } from "../../../secrets/source.js";

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

/** A source that counts its lookups and answers from a table. */
class TableSource implements SecretSource {
  calls = 0;
  constructor(
    readonly name: string,
    readonly table: Record<string, Lookup>,
    readonly gate?: Promise<void>,
  ) {}
  async lookup(key: string): Promise<Lookup> {
    this.calls++;
    await this.gate;
    return this.table[key] ?? { kind: "missing" };
  }
}

describe("SecretResolver caching", () => {
  it("makes one lookup for concurrent resolutions of a reference (single-flight)", async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const env = new TableSource("env", { K: { kind: "found", value: "value-1234" } }, gate);
    const r = new SecretResolver({ sources: new Map([["env", env]]), order: ["env"] });
    const all = Promise.all([r.resolve("K"), r.resolve("K"), r.resolve("K")]);
    open();
    const [a, b, c] = await all;
    expect(env.calls).toBe(1);
    expect(a).toBe(b);
    expect(b).toBe(c);
    expect(r.peek("K")?.reveal()).toBe("value-1234");
  });

  it("keeps a resolution until the earliest expiry its sources gave", async () => {
    let clock = 1_000_000;
    const first = new TableSource("first", { K: { kind: "missing", expiresAt: clock + 1_000 } });
    const env = new TableSource("env", { K: { kind: "found", value: "value-1234" } });
    const r = new SecretResolver({
      sources: new Map<string, SecretSource>([
        ["first", first],
        ["env", env],
      ]),
      order: ["first", "env"],
      ttlMs: 60_000,
      now: () => clock,
    });
    const a = (await r.resolve("K")).secret!;
    clock += 999;
    expect(r.peek("K")).toBe(a);
    clock += 1;
    expect(r.peek("K")).toBeUndefined();
    const b = (await r.resolve("K")).secret!;
    expect(first.calls).toBe(2);
    // Same value from the same source: the same Secret object.
    expect(b).toBe(a);
  });

  it("marks a stale answer and says why", async () => {
    const inf = new TableSource("infisical", {
      K: { kind: "found", value: "value-1234", stale: "Infisical answered HTTP 503" },
    });
    const r = new SecretResolver({ sources: new Map([["infisical", inf]]), order: ["infisical"] });
    const res = await r.resolve("K");
    expect(res.attempts[0]).toEqual({
      source: "infisical",
      outcome: "found",
      stale: true,
      message: "Infisical answered HTTP 503",
    });
    expect(describeAttempts(res.attempts)).toBe("infisical: found (stale) (Infisical answered HTTP 503)");
  });

  it("explains an infisical: reference when Infisical is not configured", async () => {
    const r = resolver({}, "/nonexistent/.env");
    const res = await r.resolve("infisical:/llm/KEY");
    expect(res.secret).toBeUndefined();
    expect(describeAttempts(res.attempts)).toBe(
      "infisical: error (Infisical is not configured — add sources.infisical to the rule file)",
    );
  });

  it("parses infisical: and cmd: references", () => {
    expect(parseRef("infisical:/llm/KEY")).toEqual({ source: "infisical", key: "/llm/KEY" });
    expect(parseRef("cmd:pass show openai")).toEqual({ source: "cmd", key: "pass show openai" });
  });
});
