// `keybroker status` and the brokers of a home (docs/spec.md §10): each running broker is recorded on
// its own, status lists them all with version and uptime and says when a reload was rejected,
// never creates a home, and exits 3 when no broker runs. The long tests run a dozen commands,
// each a new node process: they get a timeout to match on a loaded machine.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { cliAsync, startBroker, tempHome, writeConfig } from "../helpers/broker.js";
import { ALL_REAL, type Fixture, rulesFor, startFixture } from "../helpers/fixture.js";

const open: Fixture[] = [];
afterAll(async () => {
  for (const f of open) {
    await f.close();
    expect(f.leaks()).toEqual([]);
  }
});

async function fixture(): Promise<Fixture> {
  const f = await startFixture();
  open.push(f);
  return f;
}

/** The broker's stderr once it contains `text`. */
async function logged(f: Fixture, text: string): Promise<void> {
  while (!f.broker.stderr().includes(text)) await once(f.broker.child.stderr!, "data");
}

describe("keybroker status", () => {
  it("never creates a home, and exits 3 when no broker runs", async () => {
    const typo = join(tempHome(), "no-such-home");
    const r = await cliAsync(["status", "--home", typo]);
    expect(r.status, r.stderr).toBe(3);
    expect(r.stdout).toContain("not running");
    expect(r.stdout).toContain(`no keybroker home at ${typo}`);
    expect(existsSync(typo)).toBe(false);
    const json = await cliAsync(["status", "--home", typo, "--json"]);
    expect(json.status).toBe(3);
    expect(JSON.parse(json.stdout)).toMatchObject({ running: false, brokers: [] });
    expect(existsSync(typo)).toBe(false);

    // An existing home without a broker: 3 as well, and no CA made for it.
    const empty = tempHome();
    expect((await cliAsync(["status", "--home", empty])).status).toBe(3);
    expect(readdirSync(empty)).toEqual([]);
    const help = await cliAsync(["status", "--help"]);
    expect(help.stdout).toMatch(/3 when none runs/);
  });

  it("shows version, uptime, and a rejected reload until a good one", async () => {
    const f = await fixture();
    const r = await f.cli(["status"]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(`keybroker 0\\.1\\.0 running at ${f.broker.url} \\(pid ${f.broker.child.pid}\\), up \\d+s`),
    );
    expect(r.stdout).not.toContain("reload rejected");

    const config = join(f.dir, "keybroker.yaml");
    writeFileSync(config, "version: 1\nproviders:\n  openai:\n    inject: { hedaer: authorization }\n");
    f.broker.child.kill("SIGHUP");
    await logged(f, "reload rejected");
    const rejected = await f.cli(["status"]);
    expect(rejected.status).toBe(0);
    expect(rejected.stdout).toMatch(
      /reload rejected at \d{4}-\d\d-\d\dT[\d:.]+Z, running the previous rules/,
    );
    expect(rejected.stdout).toContain('unknown key "hedaer"');
    const json = JSON.parse((await f.cli(["status", "--json"])).stdout);
    expect(json).toMatchObject({ running: true, version: "0.1.0", pid: f.broker.child.pid });
    expect(typeof json.uptimeSeconds).toBe("number");
    expect(json.reload.rejectedAt).toMatch(/^\d{4}-/);
    expect(json.reload.message).toContain("hedaer");

    writeFileSync(config, rulesFor(f.upstream));
    const before = f.broker.stderr().split("rules reloaded").length;
    f.broker.child.kill("SIGHUP");
    while (f.broker.stderr().split("rules reloaded").length === before)
      await once(f.broker.child.stderr!, "data");
    const healed = await f.cli(["status", "--json"]);
    expect(JSON.parse(healed.stdout).reload).toBeUndefined();
  }, 120_000);

  it("status, env and run talk to the running broker without loading fetch or the broker's own modules", async () => {
    // What each command process loaded, written by a preload when it exits (not by the rules'
    // own loader, a child of the command).
    const dir = tempHome();
    const preload = join(dir, "loaded.mjs");
    writeFileSync(
      preload,
      `import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
process.on("exit", () => process.argv[1].endsWith("main.js") && writeFileSync(process.env.KB_LOADED_OUT, JSON.stringify({
  builtin: process.moduleLoadList, files: Object.keys(require.cache),
})));
`,
    );
    const f = await fixture();
    for (const [name, args] of [
      ["status", ["status"]],
      ["env", ["env"]],
      // The fixture's --home and --config go before the command's `--`.
      [
        "run",
        ["run", "--home", f.home, "--config", join(f.dir, "keybroker.yaml"), "--no-isolate", "--", "true"],
      ],
    ] as const) {
      const out = join(dir, `${name}.json`);
      const env = { NODE_OPTIONS: `--import ${preload}`, KB_LOADED_OUT: out };
      const r = name === "run" ? await cliAsync([...args], { env }) : await f.cli([...args], { env });
      expect(r.status, r.stderr).toBe(0);
      expect(r.stderr).not.toContain("no broker runs");
      const loaded = JSON.parse(readFileSync(out, "utf8")) as { builtin: string[]; files: string[] };
      // fetch is node's bundled undici; the broker's upstream is undici from node_modules.
      expect(
        loaded.builtin.filter((m) => m.includes("undici")),
        name,
      ).toEqual([]);
      expect(
        loaded.files.filter((p) => /[/\\]undici[/\\]/.test(p)),
        name,
      ).toEqual([]);
    }
  });
});

describe("two brokers on one home", () => {
  it("records each, lists both, asks for --port, and refuses a second on the same port", async () => {
    const f = await fixture();
    const env = { OPENAI_API_KEY: ALL_REAL[0]! };
    const config = join(f.dir, "keybroker.yaml");
    const second = await startBroker({ home: f.home, config, env });
    try {
      const both = await f.cli(["status"]);
      expect(both.status, both.stderr).toBe(0);
      expect(both.stdout).toContain("2 brokers run for this home");
      expect(both.stdout).toContain(`running at ${f.broker.url} (pid ${f.broker.child.pid})`);
      expect(both.stdout).toContain(`running at ${second.url} (pid ${second.child.pid})`);
      const json = JSON.parse((await f.cli(["status", "--json"])).stdout);
      expect(json.brokers.map((b: { pid: number }) => b.pid).sort()).toEqual(
        [f.broker.child.pid, second.child.pid].sort(),
      );

      // env, run and auth need to know which one.
      const ambiguous = await f.cli(["env"]);
      expect(ambiguous.status).toBe(2);
      expect(ambiguous.stderr).toContain("--port");
      expect(ambiguous.stderr).toContain(String(second.port));
      expect((await f.cli(["auth", "reset", "openai"])).status).toBe(2);
      const chosen = await f.cli(["env", "--port", String(second.port), "--format", "json"]);
      expect(chosen.status, chosen.stderr).toBe(0);
      expect(JSON.parse(chosen.stdout).HTTPS_PROXY).toBe(second.url);

      // A third on the first's port is refused, naming the first's pid.
      const clash = await cliAsync(
        ["start", "--home", f.home, "--config", config, "--port", String(f.broker.port)],
        { env },
      );
      expect(clash.status).toBe(1);
      expect(clash.stderr).toContain(`pid ${f.broker.child.pid}`);
    } finally {
      await second.stop();
    }
    // The second's record left with it: the first is the only one again.
    const one = await f.cli(["status"]);
    expect(one.status).toBe(0);
    expect(one.stdout).not.toContain("brokers run");
    expect(one.stdout).toContain(`(pid ${f.broker.child.pid})`);
    expect(readdirSync(join(f.home, "run"))).toEqual([`broker-${f.broker.port}.json`]);
    expect((await f.cli(["env", "--format", "json"])).status).toBe(0);
  }, 120_000);

  it("finds a record left by a broker that died stale, by its pid", async () => {
    const home = tempHome();
    const dead = spawn(process.execPath, ["-e", ""]);
    await once(dead, "exit");
    mkdirSync(join(home, "run"), { recursive: true });
    const record = join(home, "run", "broker-45678.json");
    writeFileSync(
      record,
      JSON.stringify({ pid: dead.pid, url: "http://127.0.0.1:45678", port: 45678, host: "127.0.0.1" }),
    );
    const config = writeConfig(tempHome(), "version: 1\n");
    const r = await cliAsync(["status", "--home", home, "--config", config]);
    expect(r.status).toBe(3);
    expect(r.stdout).toContain("not running");
    expect(existsSync(record)).toBe(false);
  });
});
