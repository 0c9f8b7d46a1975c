// A placeholder variable with aliases (docs/spec.md §4, decision 122): `env` and `run` set every name to
// the same placeholder, the key is found under any of them, `run` strips a real key from each,
// and a request carrying the placeholder read from any alias gets the real key upstream.
import { readFileSync } from "node:fs";
import { ProxyAgent, request } from "undici";
import { afterAll, describe, expect, it } from "vitest";
import {
  type BrokerProcess,
  cliAsync,
  findSecrets,
  startBroker,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { REAL_GEMINI, REAL_OPENAI } from "../helpers/fixture.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const OPENAI_NAMES = ["OPENAI_API_KEY", "CODEX_API_KEY"];
const GEMINI_NAMES = ["GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY"];
const OTHER_CODEX_KEY = "sk-proj-codex-only-3d5f7a9c1e2b4d6f8a0c";
const printEnv = [process.execPath, "-e", "process.stdout.write(JSON.stringify(process.env))"];

const homes: string[] = [];
const closers: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const close of closers) await close();
  expect(findSecrets([REAL_OPENAI, REAL_GEMINI, OTHER_CODEX_KEY], homes)).toEqual([]);
});

function home(): string {
  const h = tempHome();
  homes.push(h);
  return h;
}

/** The catalogue's openai and gemini (no credentials listed), their hosts sent to `upstream`. */
function rules(upstream: FakeUpstream): string {
  return `version: 1
upstream_ca: [${JSON.stringify(upstream.caPath)}]
resolve:
  "api.openai.com:443": "127.0.0.1:${upstream.port}"
  "generativelanguage.googleapis.com:443": "127.0.0.1:${upstream.port}"
catalogue: false
providers:
  openai:
  gemini:
`;
}

describe("placeholder aliases", () => {
  it("env sets every alias of the catalogue's openai and gemini to the same placeholder", async () => {
    const dir = home();
    writeConfig(dir, "version: 1\nproviders:\n  openai:\n  gemini:\n");
    const r = await cliAsync(["env", "--home", home(), "--format", "json"], { cwd: dir });
    expect(r.status, r.stderr).toBe(0);
    const vars = JSON.parse(r.stdout) as Record<string, string>;
    for (const names of [OPENAI_NAMES, GEMINI_NAMES]) {
      const values = names.map((n) => vars[n]);
      expect(values[0], names[0]).toMatch(/kbph-/);
      expect(new Set(values), names.join(", ")).toEqual(new Set([values[0]]));
    }
    expect(vars.OPENAI_API_KEY).not.toBe(vars.GEMINI_API_KEY);
  });

  it("run finds the key under an alias, strips it from every alias, and sets the placeholder there", async () => {
    const dir = home();
    const r = await cliAsync(["run", "--home", home(), "--", ...printEnv], {
      cwd: dir,
      env: { CODEX_API_KEY: REAL_OPENAI, GOOGLE_GENERATIVE_AI_API_KEY: REAL_GEMINI },
    });
    expect(r.status, r.stderr).toBe(0);
    const env = JSON.parse(r.stdout) as Record<string, string>;
    // The catalogue's openai and gemini are active: their keys resolved from the aliases.
    expect(env.CODEX_API_KEY).toMatch(/^sk-kb-kbph-/);
    expect(env.OPENAI_API_KEY).toBe(env.CODEX_API_KEY);
    for (const name of GEMINI_NAMES) expect(env[name], name).toBe(env.GEMINI_API_KEY);
    expect(env.GEMINI_API_KEY).toMatch(/kbph-/);
    expect(findSecrets([REAL_OPENAI, REAL_GEMINI], [], [r.stdout, r.stderr])).toEqual([]);
  });

  it("run strips a real key from an alias of a provider the client may not use", async () => {
    const dir = home();
    writeConfig(
      dir,
      "version: 1\nproviders:\n  openai: { credentials: [OPENAI_API_KEY] }\n  gemini:\nclients:\n  narrow: { providers: [gemini] }\n",
    );
    const r = await cliAsync(["run", "--home", home(), "--client", "narrow", "--", ...printEnv], {
      cwd: dir,
      // A second key, under the alias only: keybroker does not resolve it, yet it is a key.
      env: { OPENAI_API_KEY: REAL_OPENAI, CODEX_API_KEY: OTHER_CODEX_KEY, GEMINI_API_KEY: REAL_GEMINI },
    });
    expect(r.status, r.stderr).toBe(0);
    const env = JSON.parse(r.stdout) as Record<string, string>;
    expect(env.CODEX_API_KEY).toBeUndefined();
    expect(env.OPENAI_API_KEY).toBeUndefined();
    expect(env.GOOGLE_API_KEY).toMatch(/kbph-/);
    expect(findSecrets([REAL_OPENAI, REAL_GEMINI, OTHER_CODEX_KEY], [], [r.stdout, r.stderr])).toEqual([]);
  });

  describe("with a broker whose keys sit under aliases only", () => {
    let upstream: FakeUpstream;
    let broker: BrokerProcess;
    let vars: Record<string, string>;

    async function setUp(): Promise<void> {
      if (broker !== undefined) return;
      upstream = await startUpstream();
      const dir = home();
      const config = writeConfig(dir, rules(upstream));
      broker = await startBroker({
        home: home(),
        config,
        env: { CODEX_API_KEY: REAL_OPENAI, GOOGLE_API_KEY: REAL_GEMINI },
      });
      closers.push(
        () => broker.stop(),
        () => upstream.close(),
      );
      const r = await cliAsync(["env", "--home", broker.home, "--config", config, "--format", "json"]);
      expect(r.status, r.stderr).toBe(0);
      vars = JSON.parse(r.stdout) as Record<string, string>;
    }

    it("injects the real key for the placeholder read from any alias", async () => {
      await setUp();
      const agent = new ProxyAgent({
        uri: broker.url,
        requestTls: { ca: readFileSync(broker.caPath, "utf8") },
      });
      try {
        for (const name of OPENAI_NAMES) {
          const res = await request("https://api.openai.com/v1/chat/completions", {
            method: "POST",
            dispatcher: agent,
            headers: { authorization: `Bearer ${vars[name]}`, "content-type": "application/json" },
            body: "{}",
          });
          await res.body.text();
          expect(res.statusCode, name).toBe(200);
          expect(upstream.received.at(-1)!.headers.authorization, name).toBe(`Bearer ${REAL_OPENAI}`);
        }
        for (const name of GEMINI_NAMES) {
          const res = await request("https://generativelanguage.googleapis.com/v1beta/models", {
            dispatcher: agent,
            headers: { "x-goog-api-key": vars[name]! },
          });
          await res.body.text();
          expect(res.statusCode, name).toBe(200);
          expect(upstream.received.at(-1)!.headers["x-goog-api-key"], name).toBe(REAL_GEMINI);
        }
      } finally {
        await agent.close();
      }
    });
  });
});
