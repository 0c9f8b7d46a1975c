// The command line as a user meets it: init, ca, env, run, check, --help, and rule-file errors.
import { readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  cli,
  cliAsync,
  findSecrets,
  runProcess,
  startBroker,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { ALL_REAL, REAL_ANTHROPIC, REAL_OPENAI } from "../helpers/fixture.js";

const homes: string[] = [];
function home(): string {
  const h = tempHome();
  homes.push(h);
  return h;
}

afterAll(() => {
  expect(findSecrets(ALL_REAL, homes)).toEqual([]);
});

describe("keybroker init and ca", () => {
  it("creates the home, the CA with private modes, and a starter rule file", () => {
    const h = home();
    const r = cli(["init", "--home", h]);
    expect(r.status).toBe(0);
    // The next steps name the same home, so they work as printed.
    expect(r.stdout).toContain(`keybroker start --home ${h} `);
    expect(r.stdout).toContain(`keybroker check --home ${h}\n`);
    expect(statSync(h).mode & 0o777).toBe(0o700);
    expect(statSync(join(h, "ca")).mode & 0o777).toBe(0o700);
    expect(statSync(join(h, "ca", "ca-key.pem")).mode & 0o777).toBe(0o600);
    expect(statSync(join(h, "home.key")).mode & 0o777).toBe(0o600);
    // The starter file is valid as written.
    expect(
      cli(["check", "--home", h, "--config", join(h, "keybroker.yaml")], {
        env: { OPENAI_API_KEY: REAL_OPENAI },
      }).status,
    ).toBe(0);
  });

  it("tells to keep the keys in the home's .env, where check finds them (docs/spec.md §20)", () => {
    // Not scanned for secrets: the key belongs in this home's .env.
    const h = tempHome();
    const r = cli(["init", "--home", h]);
    const homeEnv = join(h, ".env");
    expect(r.stdout).toContain(
      `  1. put your real keys in ${homeEnv} (KEY=value lines, mode 0600), not in a\n`,
    );
    expect(r.stdout).toContain("project's ./.env or your shell's exports");
    expect(readFileSync(join(h, "keybroker.yaml"), "utf8")).toContain(
      "Keep the real keys in the home's .env",
    );
    // Done as told, from any folder: the key is found there.
    writeFileSync(homeEnv, `OPENAI_API_KEY=${REAL_OPENAI}\n`, { mode: 0o600 });
    const check = cli(["check", "--home", h, "--config", join(h, "keybroker.yaml")], { cwd: home() });
    expect(check.status, check.stderr).toBe(0);
    expect(check.stdout).toMatch(/OPENAI_API_KEY.*from dotenv/);
  });

  it("prints the CA path, its PEM, and a bundle with the system roots", () => {
    const h = home();
    const path = cli(["ca", "path", "--home", h]).stdout.trim();
    expect(path).toBe(join(h, "ca", "ca.pem"));
    const pem = cli(["ca", "export", "--home", h]).stdout;
    expect(pem).toBe(readFileSync(path, "utf8"));
    expect(pem).not.toContain("PRIVATE KEY");
    const bundle = readFileSync(cli(["ca", "bundle", "--home", h]).stdout.trim(), "utf8");
    expect(bundle.endsWith(pem) || bundle.includes(pem.trim())).toBe(true);
    expect(bundle.split("BEGIN CERTIFICATE").length).toBeGreaterThan(10);
  });

  it("gives usage errors exit 2", () => {
    expect(cli(["ca", "nonsense"]).status).toBe(2);
    expect(cli(["frobnicate"]).status).toBe(2);
    expect(cli(["start", "--no-such-flag"]).status).toBe(2);
  });

  it("documents every command with --help", () => {
    for (const name of ["init", "start", "run", "env", "ca", "check"]) {
      const r = cli([name, "--help"]);
      expect(r.status, name).toBe(0);
      expect(r.stdout, name).toContain(`Usage: keybroker ${name}`);
      expect(r.stdout, name).toContain("KEYBROKER_HOME");
    }
  });
});

describe("keybroker env", () => {
  it("prints proxy, CA and placeholder variables without needing any secret", () => {
    const h = home();
    const dir = home();
    const config = writeConfig(dir, "version: 1\nproviders:\n  openai: { credentials: [OPENAI_API_KEY] }\n");
    const r = cli(["env", "--home", h, "--config", config, "--format", "json"]);
    expect(r.status).toBe(0);
    const vars = JSON.parse(r.stdout) as Record<string, string>;
    expect(vars.HTTPS_PROXY).toBe("http://127.0.0.1:8899");
    expect(vars.NO_PROXY).toBe("localhost,127.0.0.1,::1");
    expect(vars.NODE_USE_ENV_PROXY).toBe("1");
    for (const name of [
      "SSL_CERT_FILE",
      "REQUESTS_CA_BUNDLE",
      "CURL_CA_BUNDLE",
      "NODE_EXTRA_CA_CERTS",
      "GIT_SSL_CAINFO",
      "DENO_CERT",
      "AWS_CA_BUNDLE",
      "PIP_CERT",
      "HTTPLIB2_CA_CERTS",
      "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
      "NIX_SSL_CERT_FILE",
      "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
    ]) {
      expect(vars[name], name).toBe(join(h, "ca", "bundle.pem"));
    }
    expect(vars.OPENAI_API_KEY).toMatch(/^sk-kb-kbph-[0-9A-Za-z]{32}$/);
    // Same home, same placeholder; another home, another placeholder.
    const again = JSON.parse(
      cli(["env", "--home", h, "--config", config, "--format", "json"]).stdout,
    ) as Record<string, string>;
    expect(again.OPENAI_API_KEY).toBe(vars.OPENAI_API_KEY);
    const other = JSON.parse(
      cli(["env", "--home", home(), "--config", config, "--format", "json"]).stdout,
    ) as Record<string, string>;
    expect(other.OPENAI_API_KEY).not.toBe(vars.OPENAI_API_KEY);
    const sh = cli(["env", "--home", h, "--config", config]).stdout;
    expect(sh).toContain(`export OPENAI_API_KEY='${vars.OPENAI_API_KEY}'`);
  });

  it("puts a client's token into the proxy URL", () => {
    const h = home();
    const config = writeConfig(
      home(),
      "version: 1\nclients:\n  default: { providers: '*' }\n  cron: { token: KB_CRON_TOKEN, providers: [openai] }\n",
    );
    const r = cli(["env", "--home", h, "--config", config, "--client", "cron", "--format", "json"], {
      env: { KB_CRON_TOKEN: "tok-123" },
    });
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout).HTTPS_PROXY).toBe("http://cron:tok-123@127.0.0.1:8899");
  });
});

describe("keybroker check", () => {
  it("exits 1 with a clear message when a provider's key is missing", () => {
    const config = writeConfig(
      home(),
      "version: 1\nproviders:\n  openai: { credentials: [OPENAI_API_KEY] }\n",
    );
    const r = cli(["check", "--home", home(), "--config", config]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('provider "openai" has no credential');
    expect(r.stderr).toContain("OPENAI_API_KEY");
  });

  it("says which source answered, never the value", () => {
    // The user's own .env holds the key by design: that folder is not the broker's to scan.
    const dir = tempHome();
    const config = writeConfig(
      dir,
      "version: 1\nproviders:\n  openai: { credentials: [OPENAI_API_KEY] }\n  anthropic: { credentials: [ANTHROPIC_API_KEY] }\n",
    );
    writeFileSync(join(dir, ".env"), `ANTHROPIC_API_KEY="${REAL_ANTHROPIC}"\n`);
    const r = cli(["check", "--home", home(), "--config", config], {
      env: { OPENAI_API_KEY: REAL_OPENAI },
      cwd: dir,
    });
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/OPENAI_API_KEY: from env \(sha256:[0-9a-f]{12}\)/);
    expect(r.stdout).toMatch(/ANTHROPIC_API_KEY: from dotenv/);
    expect(r.stdout + r.stderr).not.toContain(REAL_OPENAI);
    expect(r.stdout + r.stderr).not.toContain(REAL_ANTHROPIC);
  });

  it("reports every rule-file problem at once, each with its path", () => {
    const config = writeConfig(
      home(),
      "version: 1\nproviders:\n  openai:\n    inject: { hedaer: authorization }\n  mine:\n    hosts: ['api.openai.*']\n",
    );
    const r = cli(["check", "--config", config, "--home", home()]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('providers.openai.inject: unknown key "hedaer"');
    expect(r.stderr).toContain('did you mean "header"');
    expect(r.stderr).toContain("providers.mine.hosts[0]");
  });

  it("start checks the rule file the same way (in its loader process), and exits 1", () => {
    const config = writeConfig(
      home(),
      "version: 1\nproviders:\n  openai:\n    inject: { hedaer: authorization }\n  mine:\n    hosts: ['api.openai.*']\n",
    );
    const r = cli(["start", "--config", config, "--home", home(), "--port", "0"]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('providers.openai.inject: unknown key "hedaer"');
    expect(r.stderr).toContain('did you mean "header"');
    expect(r.stderr).toContain("providers.mine.hosts[0]");
    expect(r.stdout).not.toContain("listening");
  });

  it("start refuses an empty rule file, or one without version: 1, and exits 1", () => {
    const empty = writeConfig(home(), "");
    const r1 = cli(["start", "--config", empty, "--home", home(), "--port", "0"]);
    expect(r1.status).toBe(1);
    expect(r1.stderr).toContain('the rule file is empty: it must say at least "version: 1"');
    expect(r1.stdout).not.toContain("listening");
    const unversioned = writeConfig(home(), "providers:\n  openai: { credentials: [OPENAI_API_KEY] }\n");
    const r2 = cli(["start", "--config", unversioned, "--home", home(), "--port", "0"]);
    expect(r2.status).toBe(1);
    expect(r2.stderr).toContain('version: required key is missing: a rule file must say "version: 1"');
    expect(r2.stdout).not.toContain("listening");
  });

  it("init's starter rule file says version: 1 and passes check", () => {
    const h = home();
    expect(cli(["init", "--home", h]).status).toBe(0);
    const starter = join(h, "keybroker.yaml");
    expect(readFileSync(starter, "utf8")).toMatch(/^version: 1$/m);
    // `check` also resolves credentials (none here): only the rule file's validity matters.
    const r = cli(["check", "--home", h, "--config", starter]);
    expect(r.stderr + r.stdout).not.toContain("invalid rule file");
  });

  it("names the line of a YAML syntax error", () => {
    const config = writeConfig(home(), "version: 1\nproviders:\n  openai: { credentials: [A\n");
    const r = cli(["check", "--config", config, "--home", home()]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/line \d+/);
  });

  it("refuses to bind a non-loopback address without client tokens", () => {
    const config = writeConfig(home(), "version: 1\nlisten: 0.0.0.0:8899\n");
    const r = cli(["start", "--config", config, "--home", home()]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("token");
  });
});

describe("keybroker run", () => {
  const printEnv = [process.execPath, "-e", "process.stdout.write(JSON.stringify(process.env))"];

  it("starts a broker for the child, removes the real keys and sets placeholders", async () => {
    const h = home();
    const config = writeConfig(
      home(),
      "version: 1\nproviders:\n  openai: { credentials: [OPENAI_API_KEY] }\n",
    );
    const r = await cliAsync(["run", "--home", h, "--config", config, "--", ...printEnv], {
      env: { OPENAI_API_KEY: REAL_OPENAI, ANTHROPIC_API_KEY: REAL_ANTHROPIC },
    });
    expect(r.status).toBe(0);
    expect(r.stdout).not.toContain(REAL_OPENAI);
    expect(r.stdout).not.toContain(REAL_ANTHROPIC);
    const env = JSON.parse(r.stdout) as Record<string, string>;
    expect(env.OPENAI_API_KEY).toMatch(/^sk-kb-kbph-/);
    expect(env.HTTPS_PROXY).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(env.NODE_EXTRA_CA_CERTS).toBe(join(h, "ca", "bundle.pem"));
  });

  it("sets the CA variables of more tools, over whatever the parent had", async () => {
    const h = home();
    const stale = { AWS_CA_BUNDLE: "/old/aws.pem", PIP_CERT: "/old/pip.pem", SSL_CERT_DIR: "/old/certs" };
    const r = await cliAsync(["run", "--home", h, "--", ...printEnv], {
      env: { ...stale, HTTPLIB2_CA_CERTS: "/old/httplib2.pem" },
    });
    expect(r.status, r.stderr).toBe(0);
    const env = JSON.parse(r.stdout) as Record<string, string>;
    const bundle = join(h, "ca", "bundle.pem");
    for (const name of ["AWS_CA_BUNDLE", "PIP_CERT", "HTTPLIB2_CA_CERTS"]) expect(env[name]).toBe(bundle);
    // SSL_CERT_DIR: OpenSSL's hashed names, the keybroker CA among them.
    expect(env.SSL_CERT_DIR).toBe(join(h, "ca", "bundle.d"));
    const verify = await runProcess("openssl", [
      "verify",
      "-no-CAfile",
      "-CApath",
      env.SSL_CERT_DIR!,
      join(h, "ca", "ca.pem"),
    ]);
    expect(verify.stdout).toContain("OK");
  });

  it("uses the running broker recorded in the home", async () => {
    const h = home();
    const config = writeConfig(
      home(),
      "version: 1\nproviders:\n  openai: { credentials: [OPENAI_API_KEY] }\n",
    );
    const broker = await startBroker({ home: h, config, env: { OPENAI_API_KEY: REAL_OPENAI } });
    try {
      const r = await cliAsync(["run", "--home", h, "--config", config, "--", ...printEnv]);
      expect(r.status).toBe(0);
      expect(JSON.parse(r.stdout).HTTPS_PROXY).toBe(broker.url);
    } finally {
      await broker.stop();
    }
  });

  it("passes the child's exit code through", async () => {
    const r = await cliAsync(["run", "--home", home(), "--", process.execPath, "-e", "process.exit(7)"]);
    expect(r.status).toBe(7);
  });
});
