// The command line meets a newcomer's slips with the fix: did-you-mean for commands and
// options, global flags before the command, `run` without `--`, unknown client names, and a
// failed proxy authentication that the broker logs (never with the token).
import { once } from "node:events";
import { request } from "node:http";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { cli, cliAsync, scannedHomes, startBroker, writeConfig } from "../helpers/broker.js";
import { ALL_REAL, REAL_OPENAI, startFixture } from "../helpers/fixture.js";

const CRON_TOKEN = "kb-cron-token-Zq81xVb77Lm0";

const { home, homes } = scannedHomes([...ALL_REAL, CRON_TOKEN]);

describe("did you mean", () => {
  it("suggests the command closest to a mistyped one", () => {
    const r = cli(["stauts", "--home", home()]);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('unknown command "stauts" — did you mean "status"?');
  });

  it("suggests the option closest to a mistyped one, per command", () => {
    const start = cli(["start", "--prot", "9000", "--home", home()]);
    expect(start.status).toBe(2);
    expect(start.stderr).toContain("unknown option --prot — did you mean --port?");
    const env = cli(["env", "--fromat", "json", "--home", home()]);
    expect(env.status).toBe(2);
    expect(env.stderr).toContain("unknown option --fromat — did you mean --format?");
    const global = cli(["--hmoe", home(), "status"]);
    expect(global.status).toBe(2);
    expect(global.stderr).toContain('unknown option "--hmoe" — did you mean "--home"?');
  });

  it("lists the options when nothing is close", () => {
    const r = cli(["check", "--zzzzzz", "--home", home()]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/unknown option --zzzzzz \(options: .*--config/);
  });
});

describe("global flags before the command", () => {
  it("--home and --config work before the command's name, = form too", () => {
    const h = home();
    const path = cli(["--home", h, "ca", "path"]);
    expect(path.status).toBe(0);
    expect(path.stdout.trim()).toBe(join(h, "ca", "ca.pem"));
    const config = writeConfig(
      home(),
      "version: 1\nproviders:\n  mine: { hosts: [api.mine.example], credentials: [MINE_KEY] }\n",
    );
    const r = cli([`--home=${h}`, "--config", config, "check"], { env: { MINE_KEY: REAL_OPENAI } });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain(`rules: ${config} (valid)`);
    expect(r.stdout).toContain("mine: active");
  });

  it("stay ahead of run's -- so they are not passed to the command", () => {
    const h = home();
    const r = cli([
      "--home",
      h,
      "run",
      "--",
      process.execPath,
      "-e",
      "console.log(JSON.stringify(process.argv.slice(1)))",
    ]);
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual([]);
  });
});

describe("--config is honoured or refused, never ignored", () => {
  it("commands that read no rule file refuse it, saying why", () => {
    const config = writeConfig(home(), "version: 1\n");
    const ca = cli(["ca", "path", "--home", home(), "--config", config]);
    expect(ca.status).toBe(2);
    expect(ca.stderr).toContain(
      "--config does not apply to keybroker ca: the CA and its bundle are the home's, whatever the rules",
    );
    const stop = cli(["--config", config, "stop", "--home", home()]);
    expect(stop.status).toBe(2);
    expect(stop.stderr).toContain(
      "--config does not apply to keybroker stop: it stops the home's brokers; --port N names one",
    );
  });

  it("auth list and status with a running broker say when --config is not the broker's rule file", async () => {
    const h = home();
    const theirs = writeConfig(
      home(),
      "version: 1\nproviders:\n  openai: { credentials: [OPENAI_API_KEY] }\n",
    );
    const other = writeConfig(home(), "version: 1\n");
    const broker = await startBroker({ home: h, config: theirs, env: { OPENAI_API_KEY: REAL_OPENAI } });
    try {
      const list = await cliAsync(["auth", "list", "--home", h, "--config", other]);
      expect(list.status, list.stderr).toBe(0);
      expect(list.stdout).toContain("openai");
      expect(list.stderr).toContain(
        `keybroker status: warning: --config ${other} is not the rule file of the broker on port ${broker.port} (${theirs}); status uses the broker's rules`,
      );
      const same = await cliAsync(["status", "--home", h, "--config", theirs]);
      expect(same.status, same.stderr).toBe(0);
      expect(same.stderr).toBe("");
    } finally {
      await broker.stop();
    }
  });
});

describe("keybroker run without --", () => {
  it("says to put -- before the command", () => {
    const r = cli(["run", "ls", "-la", "--home", home()]);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain("put -- before the command to run: keybroker run -- ls -la");
  });
});

describe("unknown client names", () => {
  it("env --client names the known clients", () => {
    const config = writeConfig(
      home(),
      "version: 1\nclients:\n  default: { providers: '*' }\n  cron: { token: KB_CRON_TOKEN, providers: [openai] }\n",
    );
    const r = cli(["env", "--client", "crno", "--home", home(), "--config", config]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('no such client "crno" (known: default, cron)');
  });

  it("the broker answers 407 naming the known clients and logs every failed authentication", async () => {
    const f = await startFixture({
      extraRules:
        "clients:\n  default: { providers: '*' }\n  cron: { token: KB_CRON_TOKEN, providers: [openai] }\n",
      env: { KB_CRON_TOKEN: CRON_TOKEN },
    });
    homes.push(f.home, f.dir);
    try {
      const ask = async (user: string, password: string) => {
        const req = request({
          host: "127.0.0.1",
          port: f.broker.port,
          method: "GET",
          path: "http://tunnel.test/",
          headers: {
            "proxy-authorization": `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`,
          },
        });
        req.end();
        const [res] = (await once(req, "response")) as [import("node:http").IncomingMessage];
        let body = "";
        for await (const chunk of res) body += chunk;
        return {
          status: res.statusCode,
          body: JSON.parse(body) as { error: { type: string; message: string } },
        };
      };
      /** The broker's log once it holds `pattern` (its stderr arrives apart from the answer). */
      const logged = async (pattern: RegExp): Promise<string> => {
        while (!pattern.test(f.broker.stderr())) await once(f.broker.child.stderr!, "data");
        return f.broker.stderr();
      };
      const unknown = await ask("crno", "whatever-it-typed");
      expect(unknown.status).toBe(407);
      expect(unknown.body.error.type).toBe("client_unauthorized");
      expect(unknown.body.error.message).toBe('no such client "crno" (known: default, cron)');
      const wrong = await ask("cron", `${CRON_TOKEN}-wrong`);
      expect(wrong.status).toBe(407);
      expect(wrong.body.error.message).toBe('client "cron" did not authenticate');
      const log = await logged(/"client":"cron","reason":"wrong token"/);
      expect(log).toMatch(/"client":"crno","reason":"no such client".*proxy authentication failed \(407\)/);
      expect(log).toMatch(/"client":"cron","reason":"wrong token".*proxy authentication failed \(407\)/);
      expect(log).not.toContain(CRON_TOKEN);
      expect(log).not.toContain("whatever-it-typed");
    } finally {
      await f.close();
      expect(f.leaks()).toEqual([]);
    }
  });
});
