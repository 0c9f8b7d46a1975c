// The traps an agent's setup falls into, met with words that name the fix (decision 124): env
// toward a broker nobody started or for a Node that ignores the proxy, status on the wrong
// port, a custom provider's derived variable, a command that does not exist, and an OAuth
// server on a loopback address.
import { writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { nodeIgnoresProxy } from "../../cli/env-warnings.js";
import {
  cli,
  cliAsync,
  findSecrets,
  scannedHomes,
  startBroker,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { freePort } from "../helpers/cli-session.js";
import { ALL_REAL, REAL_ANTHROPIC, REAL_OPENAI } from "../helpers/fixture.js";

const { home } = scannedHomes(ALL_REAL);

describe("keybroker env", () => {
  it("warns when no broker answers on the address it prints, and not when one does", async () => {
    const h = home();
    const port = await freePort();
    const config = writeConfig(home(), `version: 1\nlisten: 127.0.0.1:${port}\n`);
    const alone = await cliAsync(["env", "--home", h, "--config", config, "--node-preload"], {
      env: { OPENAI_API_KEY: REAL_OPENAI },
    });
    expect(alone.status, alone.stderr).toBe(0);
    expect(alone.stdout).toContain(`HTTPS_PROXY='http://127.0.0.1:${port}'`);
    expect(alone.stderr).toBe(
      `keybroker env: warning: no broker is running on 127.0.0.1:${port}: start one with \`keybroker start\` (or use \`keybroker run\`)\n`,
    );

    const broker = await startBroker({ home: h, config, env: { OPENAI_API_KEY: REAL_OPENAI } });
    try {
      const served = await cliAsync(["env", "--home", h, "--config", config, "--node-preload"]);
      expect(served.status, served.stderr).toBe(0);
      expect(served.stderr).toBe("");
    } finally {
      await broker.stop();
    }
  });

  it("warns on a Node whose fetch ignores HTTPS_PROXY unless --node-preload is given", async () => {
    const config = writeConfig(home(), "version: 1\n");
    const r = await cliAsync(["env", "--home", home(), "--config", config], {
      env: { OPENAI_API_KEY: REAL_OPENAI },
    });
    expect(r.status, r.stderr).toBe(0);
    const warning = `keybroker env: warning: this is Node ${process.versions.node}, whose fetch ignores HTTPS_PROXY: a Node agent started with these variables bypasses keybroker; add --node-preload (or use \`keybroker run\`)`;
    // This test runs the CLI on the Node running vitest: the warning follows its version.
    if (nodeIgnoresProxy(process.versions.node)) expect(r.stderr).toContain(warning);
    else expect(r.stderr).not.toContain("whose fetch ignores");
    const preloaded = await cliAsync(["env", "--home", home(), "--config", config, "--node-preload"], {
      env: { OPENAI_API_KEY: REAL_OPENAI },
    });
    expect(preloaded.stderr).not.toContain("whose fetch ignores");
  });

  it("knows which Node versions route fetch through the proxy by themselves", () => {
    expect(["20.19.0", "20.20.2", "22.20.0", "21.7.3"].map((v) => nodeIgnoresProxy(v))).toEqual([
      true,
      true,
      true,
      true,
    ]);
    expect(["22.21.0", "22.22.1", "24.0.0", "25.1.0"].map((v) => nodeIgnoresProxy(v))).toEqual([
      false,
      false,
      false,
      false,
    ]);
  });
});

describe("a keybroker of another home on the port", () => {
  it("env, status and run --port name it instead of a certificate error or a bare refusal", async () => {
    const theirs = await startBroker({ home: home(), env: { OPENAI_API_KEY: REAL_OPENAI } });
    try {
      const h = home();
      const config = writeConfig(home(), `version: 1\nlisten: 127.0.0.1:${theirs.port}\n`);
      const env = await cliAsync(["env", "--home", h, "--config", config, "--node-preload"]);
      expect(env.status, env.stderr).toBe(0);
      expect(env.stdout).toContain(`HTTPS_PROXY='http://127.0.0.1:${theirs.port}'`);
      expect(env.stderr).toBe(
        `keybroker env: warning: 127.0.0.1:${theirs.port} is served by a keybroker of another home (pid ${theirs.child.pid}): it has another CA and does not know this home's placeholders, so the agent's TLS through it fails with a certificate error: start this home's broker on another port (keybroker start --port N: env then names that one), or use that broker's --home\n`,
      );
      const foreign = `no keybroker of this home runs on port ${theirs.port}; port ${theirs.port} is served by a keybroker of another home (pid ${theirs.child.pid}): it has another CA and does not know this home's placeholders; name its home with --home`;
      const status = await cliAsync(["status", "--home", h, "--port", String(theirs.port)]);
      expect(status.status).toBe(3);
      expect(status.stderr).toContain(`keybroker status: ${foreign}\n`);
      const run = await cliAsync([
        "run",
        "--home",
        h,
        "--port",
        String(theirs.port),
        "--no-isolate",
        "--",
        "true",
      ]);
      expect(run.status).toBe(1);
      expect(run.stderr).toContain(foreign);
      // The broker's own home sees its broker there, and env says nothing.
      const own = await cliAsync(["env", "--home", theirs.home, "--node-preload"]);
      expect(own.stderr).toBe("");
    } finally {
      await theirs.stop();
    }
  });

  it("env names a program that is not keybroker holding the port", async () => {
    const server = createServer((_req, res) => res.end("<html>hello</html>"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    try {
      const config = writeConfig(home(), `version: 1\nlisten: 127.0.0.1:${port}\n`);
      const r = await cliAsync(["env", "--home", home(), "--config", config, "--node-preload"]);
      expect(r.status, r.stderr).toBe(0);
      expect(r.stderr).toBe(
        `keybroker env: warning: 127.0.0.1:${port} is held by a program that is not keybroker: start keybroker on another port (keybroker start --port N, or listen: in the rule file): env then names that one\n`,
      );
    } finally {
      server.close();
    }
  });
});

describe("keybroker status --port", () => {
  it("names the port this home's broker runs on when nothing of it runs on the one given", async () => {
    const h = home();
    const broker = await startBroker({ home: h, env: { OPENAI_API_KEY: REAL_OPENAI } });
    try {
      const other = await freePort();
      const r = await cliAsync(["status", "--home", h, "--port", String(other)]);
      expect(r.status).toBe(3);
      expect(r.stderr).toContain(
        `no keybroker of this home runs on port ${other}; one runs on port ${broker.port} (keybroker status --port ${broker.port})`,
      );
    } finally {
      await broker.stop();
    }
  });
});

describe("keybroker check", () => {
  it("run in another folder than the broker's, checks the broker's rule file, says why, and counts the key it holds", async () => {
    const h = home();
    // The user's project folder holds the key in its .env: not scanned, it is where the key lives.
    const project = tempHome();
    const elsewhere = home();
    const config = writeConfig(
      project,
      "version: 1\nproviders:\n  openai: { credentials: [OPENAI_API_KEY] }\n",
    );
    writeFileSync(join(project, ".env"), `OPENAI_API_KEY=${REAL_OPENAI}\n`, { mode: 0o600 });
    // Started in the project folder, as `npm start` there: the key comes from its ./.env.
    const broker = await startBroker({ home: h, cwd: project, args: ["--config", "keybroker.yaml"] });
    try {
      const r = await cliAsync(["check", "--home", h], { cwd: elsewhere });
      expect(r.status, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toContain(`rules: ${config} (valid)\n`);
      expect(r.stdout).toContain(
        `  read because: the running broker's (pid ${broker.child.pid}, port ${broker.port}): no --config, $KEYBROKER_CONFIG or ./keybroker.yaml in ${elsewhere}\n`,
      );
      expect(r.stdout).toContain(
        `  the running broker (pid ${broker.child.pid}) holds a credential for openai: it read it from its own environment or folder, which this shell does not see\n`,
      );
      expect(r.stderr).not.toContain("problem:");
      // In the project folder its own file is read, and found there.
      const there = await cliAsync(["check", "--home", h], { cwd: project });
      expect(there.status, there.stderr).toBe(0);
      expect(there.stdout).toContain("  read because: ./keybroker.yaml in this folder\n");
      expect(there.stdout).toContain("openai: active");
      // Named by --config, the file is read and a key missing here is a problem: nothing hides it.
      const other = writeConfig(home(), "version: 1\nproviders:\n  openai: { credentials: [OTHER_KEY] }\n");
      const named = await cliAsync(["check", "--home", h, "--config", other], { cwd: elsewhere });
      expect(named.status).toBe(1);
      expect(named.stdout).toContain("  read because: named by --config\n");
      expect(named.stderr).toContain(
        `warning: the running broker (pid ${broker.child.pid}, port ${broker.port}) runs ${config}, not these rules`,
      );
      expect(named.stderr).toContain('problem: provider "openai"');
      expect(
        findSecrets([REAL_OPENAI], [], [r.stdout, r.stderr, there.stdout, named.stdout, named.stderr]),
      ).toEqual([]);
    } finally {
      await broker.stop();
    }
  });

  it("says which variable a custom provider without placeholder.env gets", () => {
    const config = writeConfig(
      home(),
      [
        "version: 1",
        "providers:",
        "  my-llm: { hosts: [llm.example.com], credentials: [MY_KEY] }",
        "  named: { hosts: [n.example.com], credentials: [MY_KEY], placeholder: { env: NAMED_KEY } }",
        "  sso: { hosts: [s.example.com], oauth: { token_endpoint: https://s.example.com/t, device_authorization_endpoint: https://s.example.com/d, client_id: c } }",
        "",
      ].join("\n"),
    );
    const r = cli(["check", "--home", home(), "--config", config], { env: { MY_KEY: REAL_OPENAI } });
    expect(r.stderr).toContain(
      'warning: provider "my-llm" has no placeholder.env: run and env set its placeholder in MY_LLM_API_KEY; point the agent at that variable, or name the one the agent reads with placeholder: { env: NAME }',
    );
    expect(r.stderr).not.toContain('"named"');
    expect(r.stderr).not.toContain('"sso"');
    // A warning, not a problem: the rules are usable as they are.
    expect(r.stderr).not.toContain("problem:");
  });
});

describe("keybroker run", () => {
  it("says which variables hold each placeholder, and warns of a provider without a credential and a removed key no placeholder replaces", async () => {
    const h = home();
    const config = writeConfig(
      home(),
      [
        "version: 1",
        "providers:",
        "  my-llm: { hosts: [llm.example.com], credentials: [MY_KEY] }",
        "  keyless: { hosts: [k.example.com], credentials: [KEYLESS_KEY], placeholder: { env: KEYLESS_API_KEY } }",
        "",
      ].join("\n"),
    );
    const env = { MY_KEY: REAL_OPENAI, OPENAI_API_KEY: REAL_ANTHROPIC };
    const show = `console.log(JSON.stringify(["MY_KEY", "MY_LLM_API_KEY", "KEYLESS_API_KEY", "OPENAI_API_KEY", "NIX_SSL_CERT_FILE"].map((n) => process.env[n] ?? null)))`;
    const run = (extra: string[] = []) =>
      cliAsync(
        [
          "run",
          "--home",
          h,
          "--config",
          config,
          "--no-isolate",
          ...extra,
          "--",
          process.execPath,
          "-e",
          show,
        ],
        {
          env,
        },
      );
    const warnings = [
      "keybroker run: warning: MY_KEY held my-llm's key and was removed; no placeholder takes its place (it has one in MY_LLM_API_KEY): a command that reads MY_KEY finds it unset; add MY_KEY to my-llm's placeholder: { env: [...] } in the rule file",
      "keybroker run: warning: the broker has no credential for keyless: the command's requests to it get 503 credential_unavailable; set KEYLESS_KEY where the broker reads it (keybroker check says where it looked)",
    ];
    const alone = await run();
    expect(alone.status, alone.stderr).toBe(0);
    const [myKey, myLlm, keyless, openai, nix] = JSON.parse(alone.stdout) as (string | null)[];
    expect(myKey).toBeNull();
    expect(myLlm).toMatch(/kbph-/);
    expect(keyless).toMatch(/kbph-/);
    expect(openai).toMatch(/^sk-kb-kbph-/);
    expect(nix).toBe(join(h, "ca", "bundle.pem"));
    expect(alone.stderr).toMatch(
      /keybroker run: no broker runs for this home: one of run's own serves the command on http:\/\/127\.0\.0\.1:\d+ until it exits\n/,
    );
    for (const line of [
      "keybroker run: my-llm: placeholder in MY_LLM_API_KEY",
      "keybroker run: keyless: placeholder in KEYLESS_API_KEY",
      "keybroker run: openai: placeholder in OPENAI_API_KEY, CODEX_API_KEY",
      ...warnings,
    ]) {
      expect(alone.stderr).toContain(`${line}\n`);
    }

    // From a running broker's rules (its admin API) the same, and --quiet keeps only the warnings.
    const broker = await startBroker({ home: h, config, env });
    try {
      const served = await run(["--quiet"]);
      expect(served.status, served.stderr).toBe(0);
      expect(served.stderr).toBe(`${warnings.join("\n")}\n`);
      const loud = await run();
      expect(loud.stderr).toContain("keybroker run: openai: placeholder in OPENAI_API_KEY, CODEX_API_KEY\n");
      expect(loud.stderr).not.toContain("no broker runs");
      expect(
        findSecrets(
          [REAL_OPENAI, REAL_ANTHROPIC],
          [],
          [alone.stderr, alone.stdout, served.stderr, loud.stderr],
        ),
      ).toEqual([]);
    } finally {
      await broker.stop();
    }
  });

  it("says a command that does not exist is not found, and exits 127 as a shell does", () => {
    const r = cli(["run", "--home", home(), "--", "nosuchcmd-kb-test", "--flag"], {
      env: { OPENAI_API_KEY: REAL_OPENAI },
    });
    expect(r.status).toBe(127);
    expect(r.stderr).toContain("keybroker run: command not found: nosuchcmd-kb-test");
    expect(r.stderr).not.toContain("ENOENT");
  });
});

describe("an OAuth server on a loopback address", () => {
  it("is refused with the two ways to allow it, and allow_private_upstream lets it through", async () => {
    const port = await freePort();
    const rules = (extra: string) =>
      `version: 1\nproviders:\n  local-sso:\n    hosts: [api.local.test]\n    oauth: { issuer: "http://127.0.0.1:${port}/", client_id: app_1 }\n${extra}`;
    const refused = cli([
      "auth",
      "add",
      "local-sso",
      "--home",
      home(),
      "--config",
      writeConfig(home(), rules("")),
    ]);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toContain("127.0.0.1 resolves to 127.0.0.1, a loopback/private address, refused");
    expect(refused.stderr).toContain(
      `list "127.0.0.1:${port}" under resolve: (with its CA under upstream_ca: when it serves https), or set allow_private_upstream: true on the provider`,
    );
    // With the opt-in the broker's agent connects: nothing listens there, so the port refuses.
    const allowed = cli([
      "auth",
      "add",
      "local-sso",
      "--home",
      home(),
      "--config",
      writeConfig(home(), rules("    allow_private_upstream: true\n")),
    ]);
    expect(allowed.status).toBe(1);
    expect(allowed.stderr).toContain(`ECONNREFUSED 127.0.0.1:${port}`);
    expect(allowed.stderr).not.toContain("loopback/private");
  });
});
