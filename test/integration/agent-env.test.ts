// What `keybroker env` and `keybroker run` give an agent (docs/spec.md §5, §10): the running broker's
// providers wherever they run, every provider the rule file names even while its credential
// cannot be resolved, and no real secret left in the command's environment under any name.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { request } from "undici";
import { afterAll, describe, expect, it } from "vitest";
import { cliAsync, findSecrets, tempHome, writeConfig } from "../helpers/broker.js";
import { ALL_REAL, type Fixture, REAL_OPENAI, rulesFor, startFixture } from "../helpers/fixture.js";

const open: Fixture[] = [];
const homes: string[] = [];
afterAll(async () => {
  for (const f of open) {
    await f.close();
    expect(f.leaks()).toEqual([]);
  }
  expect(findSecrets([...ALL_REAL, AWKWARD, DOTENV_ONLY], homes)).toEqual([]);
});

async function fixture(opts: Parameters<typeof startFixture>[0] = {}): Promise<Fixture> {
  const f = await startFixture(opts);
  open.push(f);
  return f;
}

function home(): string {
  const h = tempHome();
  homes.push(h);
  return h;
}

/** A key whose URL-encoded, JSON-escaped and base64 forms all differ from the plain one. */
const AWKWARD = 'sk-real+openai/7f3a"9c1e&5b2d=4f60\\a8e1';
const DOTENV_ONLY = "sk-ant-dotenv-only-5e7a9b1d2f4608c3";
const printEnv = [process.execPath, "-e", "process.stdout.write(JSON.stringify(process.env))"];

describe("keybroker run keeps real secrets out of the command's environment", () => {
  it("removes every variable holding a resolved secret, in any form, whatever its name, and names it", async () => {
    // The user's own folder holds the .env by design: it is not scanned.
    const dir = tempHome();
    const config = writeConfig(
      dir,
      "version: 1\nproviders:\n  openai: { credentials: [OPENAI_API_KEY] }\n  anthropic: { credentials: [ANTHROPIC_API_KEY] }\n",
    );
    // Resolved from ./.env, never exported under its own name: only its copy is.
    writeFileSync(join(dir, ".env"), `ANTHROPIC_API_KEY=${DOTENV_ONLY}\n`);
    const r = await cliAsync(["run", "--home", home(), "--config", config, "--", ...printEnv], {
      cwd: dir,
      env: {
        OPENAI_API_KEY: AWKWARD,
        MY_OTHER_SECRET: AWKWARD,
        AS_URL: `https://example.test/?key=${encodeURIComponent(AWKWARD)}`,
        AS_JSON: JSON.stringify({ key: AWKWARD }),
        AS_BASIC: Buffer.from(`x-access-token:${AWKWARD}`).toString("base64"),
        DOTENV_COPY: `Bearer ${DOTENV_ONLY}`,
        KEEP_ME: "an ordinary value",
      },
    });
    expect(r.status, r.stderr).toBe(0);
    const env = JSON.parse(r.stdout) as Record<string, string>;
    for (const name of ["MY_OTHER_SECRET", "AS_URL", "AS_JSON", "AS_BASIC", "DOTENV_COPY"]) {
      expect(env[name], name).toBeUndefined();
      expect(r.stderr).toContain(name);
    }
    expect(r.stderr).toContain("removed from the command's environment");
    expect(env.KEEP_ME).toBe("an ordinary value");
    expect(env.OPENAI_API_KEY).toMatch(/^sk-kb-kbph-/);
    expect(env.ANTHROPIC_API_KEY).toMatch(/^sk-ant-kbph-|kbph-/);
    for (const secret of [AWKWARD, DOTENV_ONLY]) {
      expect(findSecrets([secret], [], [r.stdout, r.stderr])).toEqual([]);
    }
    expect(r.stdout).not.toContain(encodeURIComponent(AWKWARD));
    expect(r.stdout).not.toContain(JSON.stringify(AWKWARD).slice(1, -1));
  });
});

describe("keybroker run with a client the rules do not define", () => {
  it("exits 1 with the reason instead of staying up with the broker it started", async () => {
    const r = await cliAsync(["run", "--home", home(), "--client", "nobody", "--", ...printEnv]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('no such client "nobody" (known: ');
    expect(r.stdout).toBe("");
  });
});

describe("with a broker running, env and run use its rules", () => {
  it("gives the broker's providers in another folder, and warns about a rule file that differs", async () => {
    const f = await fixture();
    const github = await f.placeholder("github");
    // A folder with no rule file: the embedded catalogue has no github, the broker has.
    const elsewhere = home();
    const bare = await cliAsync(["env", "--home", f.home, "--format", "json"], { cwd: elsewhere });
    expect(bare.status, bare.stderr).toBe(0);
    expect(JSON.parse(bare.stdout).GITHUB_TOKEN).toBe(github);
    expect(JSON.parse(bare.stdout).HTTPS_PROXY).toBe(f.broker.url);
    expect(bare.stderr).not.toContain("differs");

    // A folder with another rule file: the broker's rules still decide, with a warning.
    const other = writeConfig(
      elsewhere,
      "version: 1\nproviders:\n  mistral: { credentials: [MISTRAL_API_KEY] }\n",
    );
    const warned = await cliAsync(["run", "--home", f.home, "--", ...printEnv], {
      cwd: elsewhere,
      // The shell exports the key (named by the broker's rules, not by the file here) and a copy.
      env: { OPENAI_API_KEY: REAL_OPENAI, MY_COPY: REAL_OPENAI },
    });
    expect(warned.status, warned.stderr).toBe(0);
    expect(warned.stderr).toContain(`the rule file ${other} differs from the running broker's`);
    const env = JSON.parse(warned.stdout) as Record<string, string>;
    expect(env.GITHUB_TOKEN).toBe(github);
    expect(env.MISTRAL_API_KEY).toBeUndefined();
    expect(env.HTTPS_PROXY).toBe(f.broker.url);
    // The running broker's case removes copies too.
    expect(env.OPENAI_API_KEY).toMatch(/kbph-/);
    expect(env.MY_COPY).toBeUndefined();
    expect(warned.stderr).toContain("MY_COPY");

    // The broker's own rule file: no warning.
    const same = await f.cli(["env", "--format", "json"]);
    expect(same.stderr).not.toContain("differs");
  }, 120_000);
});

describe("every provider the rule file names is active (docs/spec.md §10)", () => {
  const failing = `  vault:
    hosts: [tunnel.test]
    inject: { header: authorization, format: "Bearer {secret}" }
    placeholder: { env: VAULT_TOKEN }
    credentials: ["cmd:false"]
`;

  it("gives a placeholder for a provider whose credential fails, with or without a broker; the agent gets 503", async () => {
    const f = await fixture({ extraRules: failing });
    const withBroker = await f.cli(["env", "--format", "json"]);
    expect(withBroker.status, withBroker.stderr).toBe(0);
    const vars = JSON.parse(withBroker.stdout) as Record<string, string>;
    expect(vars.VAULT_TOKEN).toMatch(/kbph-/);

    // The same set from the rule file alone (another home, so no broker).
    const config = writeConfig(home(), rulesFor(f.upstream, failing));
    const alone = await cliAsync(["env", "--home", home(), "--config", config, "--format", "json"]);
    expect(alone.status, alone.stderr).toBe(0);
    expect(Object.keys(JSON.parse(alone.stdout)).sort()).toEqual(Object.keys(vars).sort());

    const agent = f.proxyAgent();
    try {
      const res = await request("https://tunnel.test/v1/secrets", {
        dispatcher: agent,
        headers: { authorization: `Bearer ${vars.VAULT_TOKEN}` },
      });
      const body = await res.body.text();
      expect(res.statusCode).toBe(503);
      expect(res.headers["x-keybroker-error"]).toBe("credential_unavailable");
      expect(JSON.parse(body).error.provider).toBe("vault");
    } finally {
      await agent.close();
    }
  }, 120_000);
});
