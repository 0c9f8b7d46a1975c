// What a person reads: the broker's log (pretty when asked, JSON by default off a terminal),
// the optional access log line per request, and the JSON forms of check and audit verify.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { request } from "undici";
import { describe, expect, it } from "vitest";
import { currentAuditFile } from "../../audit/audit-log.js";
import { writeAuditEntries } from "../helpers/audit.js";
import { cli, findSecrets, scannedHomes, writeConfig } from "../helpers/broker.js";
import { ALL_REAL, type FixtureOptions, REAL_GEMINI, REAL_OPENAI, startFixture } from "../helpers/fixture.js";

const { home, homes } = scannedHomes(ALL_REAL);

/** Two requests through a fixture broker (a header and a query injection); its stderr after. */
async function brokerLog(opts: FixtureOptions): Promise<string> {
  const f = await startFixture(opts);
  homes.push(f.home, f.dir);
  const agent = f.proxyAgent();
  try {
    const openai = await request("https://api.openai.com/v1/chat/completions", {
      method: "POST",
      headers: {
        authorization: `Bearer ${await f.placeholder("openai")}`,
        "content-type": "application/json",
      },
      body: "{}",
      dispatcher: agent,
    });
    await openai.body.text();
    const gemini = await request(
      `https://generativelanguage.googleapis.com/v1beta/models?key=${await f.placeholder("gemini")}`,
      { dispatcher: agent },
    );
    await gemini.body.text();
  } finally {
    await agent.close();
    await f.close();
  }
  // f.leaks() would take the settings in opts.env ("1", "pretty") for secrets too.
  expect(findSecrets(ALL_REAL, [f.home, f.dir])).toEqual([]);
  return f.broker.stderr();
}

describe("the access log", () => {
  it("is off by default", async () => {
    const log = await brokerLog({});
    expect(log).not.toContain('"access":true');
  });

  it("KEYBROKER_ACCESS_LOG=1 logs one line per request, injected query values removed", async () => {
    const log = await brokerLog({ env: { KEYBROKER_ACCESS_LOG: "1" } });
    const lines = log
      .split("\n")
      .filter((l) => l.includes('"access":true'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({
      level: "info",
      client: "default",
      provider: "openai",
      credential: "OPENAI_API_KEY",
      decision: "injected",
      msg: "POST api.openai.com/v1/chat/completions 200",
    });
    expect(typeof lines[0]!.ms).toBe("number");
    expect(lines[1]).toMatchObject({
      provider: "gemini",
      msg: "GET generativelanguage.googleapis.com/v1beta/models?key=[REDACTED] 200",
    });
    expect(log).not.toContain(REAL_GEMINI);
    expect(log).not.toContain(REAL_OPENAI);
  });

  it("the rule file's log: { access: true } turns it on, pretty when asked", async () => {
    const log = await brokerLog({
      extraRules: "log: { access: true }\n",
      env: { KEYBROKER_LOG_FORMAT: "pretty" },
    });
    expect(log).toMatch(
      /^\d\d:\d\d:\d\d\.\d{3} INFO {2}POST api\.openai\.com\/v1\/chat\/completions 200 access=true client=default provider=openai credential=OPENAI_API_KEY decision=injected/m,
    );
    // One line per event, none of them JSON, and no colour off a terminal.
    for (const line of log.trim().split("\n")) expect(line).toMatch(/^\d\d:\d\d:\d\d\.\d{3} [A-Z]+ /);
    expect(log).not.toContain("\u001b[");
  });
});

describe("check --json", () => {
  it("prints the report as one JSON object, with the same exit codes", () => {
    const config = writeConfig(
      home(),
      "version: 1\nproviders:\n  openai: { credentials: [OPENAI_API_KEY] }\n  anthropic: { credentials: [ANTHROPIC_API_KEY] }\n",
    );
    const r = cli(["check", "--json", "--home", home(), "--config", config], {
      env: { OPENAI_API_KEY: REAL_OPENAI },
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toBe("");
    const report = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(report).toMatchObject({
      rules: config,
      valid: true,
      lookupChain: [expect.stringMatching(/^dotenv/), "env"],
      problems: [expect.stringContaining('provider "anthropic" has no credential')],
    });
    const providers = report.providers as {
      id: string;
      state: string;
      credentials: Record<string, unknown>[];
    }[];
    expect(providers.find((p) => p.id === "openai")).toMatchObject({
      state: "active",
      credentials: [
        { ref: "OPENAI_API_KEY", found: true, source: "env", fingerprint: expect.stringMatching(/^sha256:/) },
      ],
    });
    expect(providers.find((p) => p.id === "anthropic")).toMatchObject({
      state: "no_credential",
      credentials: [
        {
          ref: "ANTHROPIC_API_KEY",
          found: false,
          attempts: [
            { source: "dotenv", outcome: "missing" },
            { source: "env", outcome: "missing" },
          ],
        },
      ],
    });
    expect(r.stdout).not.toContain(REAL_OPENAI);
  });

  it("reports an invalid rule file as valid: false with each problem", () => {
    const config = writeConfig(
      home(),
      "version: 1\nproviders:\n  openai:\n    inject: { hedaer: authorization }\n",
    );
    const r = cli(["check", "--json", "--home", home(), "--config", config]);
    expect(r.status).toBe(1);
    expect(JSON.parse(r.stdout)).toEqual({
      rules: config,
      valid: false,
      lookupChain: [],
      providers: [],
      inactive: [],
      warnings: [],
      problems: [
        expect.stringContaining('providers.openai.inject: unknown key "hedaer" — did you mean "header"?'),
      ],
    });
  });
});

describe("audit verify --json", () => {
  it("prints both chains: ok, lines and files when intact, and the first bad line of a broken one", async () => {
    const h = home();
    await writeAuditEntries(h, 4);
    const ok = cli(["audit", "verify", "--json", "--home", h]);
    expect(ok.status).toBe(0);
    expect(JSON.parse(ok.stdout)).toEqual({
      ok: true,
      exitCode: 0,
      audit: { ok: true, files: [currentAuditFile(h)], lines: 4, fromGenesis: true, gaps: [] },
      security: { ok: true, files: [], lines: 0, fromGenesis: true, gaps: [] },
    });
    const path = currentAuditFile(h);
    const lines = readFileSync(path, "utf8").split("\n");
    lines[1] = lines[1]!.replace('"status":200', '"status":201');
    writeFileSync(path, lines.join("\n"));
    const broken = cli(["audit", "verify", "--json", "--home", h]);
    expect(broken.status).toBe(1);
    expect(JSON.parse(broken.stdout)).toMatchObject({
      ok: false,
      exitCode: 1,
      audit: { ok: false, file: join(h, "audit", "audit.jsonl"), line: 2, lines: 1 },
      security: { ok: true },
    });
  });
});
