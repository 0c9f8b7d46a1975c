// Ordinary mistakes end in a message and an exit code, never a stack trace: a reader that goes
// away (`| head`), a bad upstream_ca file, a bad KEYBROKER_LOG_LEVEL, and a fuzz pass over every
// command with empty, missing, mistyped and misplaced values.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { writeAuditEntries } from "../helpers/audit.js";
import {
  baseEnv,
  CLI,
  type CliResult,
  cli,
  cliAsync,
  outputs,
  runProcess,
  scannedHomes,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { ALL_REAL, REAL_OPENAI } from "../helpers/fixture.js";
import { startUpstream } from "../helpers/upstream.js";

const { home, homes } = scannedHomes(ALL_REAL);

/** No stack trace, no `internal error`, whatever went wrong. */
function expectNoCrash(r: CliResult, what: string): void {
  const text = r.stdout + r.stderr;
  expect(text, what).not.toContain("internal error");
  expect(text, what).not.toMatch(/^\s+at .+:\d+:\d+\)?$/m);
  expect(r.stdout + r.stderr, what).not.toContain(REAL_OPENAI);
}

/**
 * Runs a command whose reader has already gone away: the parent closes its end of the child's
 * stdout before the child (still loading Node) can write anything, as `| head -1` does when it
 * has read its line.
 */
async function withClosedStdout(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: baseEnv(env),
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout.destroy();
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const [status] = (await once(child, "close")) as [number | null];
  outputs.push(stderr);
  return { status, stdout: "", stderr };
}

const DEADLINE_MS = 90_000;

describe("a closed pipe ends the command quietly", () => {
  it("check | head -1 keeps check's own exit code and prints no error", async () => {
    const h = home();
    const config = writeConfig(
      home(),
      "version: 1\nproviders:\n  openai: { credentials: [OPENAI_API_KEY] }\n",
    );
    const ok = await withClosedStdout(["check", "--home", h, "--config", config], {
      OPENAI_API_KEY: REAL_OPENAI,
    });
    expect(ok.stderr).toBe("");
    expect(ok.status).toBe(0);
    const failing = await withClosedStdout(["check", "--home", h, "--config", config]);
    expectNoCrash(failing, "check without the key");
    expect(failing.status).toBe(1);
    expect(failing.stderr).toContain('provider "openai" has no credential');
  });

  it("audit tail | head and audit tail --json | head", async () => {
    const h = home();
    await writeAuditEntries(h, 200);
    for (const args of [
      ["audit", "tail", "-n", "200"],
      ["audit", "tail", "--json", "-n", "200"],
      ["audit", "verify"],
    ]) {
      const r = await withClosedStdout([...args, "--home", h]);
      expect(r.stderr, args.join(" ")).toBe("");
      expect(r.status, args.join(" ")).toBe(0);
    }
  });

  it("status, env, ca export and --help | head", async () => {
    const h = home();
    // Each keeps its own exit code: status says 3 when no broker runs.
    for (const [args, code] of [
      [["status", "--home", h], 3],
      [["env", "--home", h], 0],
      [["ca", "export", "--home", h], 0],
      [["--help"], 0],
    ] as const) {
      const r = await withClosedStdout([...args]);
      // env's warnings (no broker running here, Node 20) are no crash output.
      expect(r.stderr.replace(/^keybroker env: warning: .*\n/gm, ""), args.join(" ")).toBe("");
      expect(r.status, args.join(" ")).toBe(code);
    }
  });
});

describe("upstream_ca files are checked when the rule file is loaded", () => {
  const cases = [
    [
      "a missing file",
      "missing.pem",
      /upstream_ca\[0\]: cannot read .*missing\.pem: it does not exist — give the path of a PEM file/,
    ],
    ["a file that is not PEM", "notpem.pem", /upstream_ca\[0\]: .*notpem\.pem holds no PEM certificate/],
    [
      "a PEM block that is no certificate",
      "broken.pem",
      /upstream_ca\[0\]: .*broken\.pem: certificate 1 is not a valid PEM certificate/,
    ],
    ["a folder", "certs", /upstream_ca\[0\]: .*certs is a folder, not a file/],
  ] as const;

  function ruleFile(file: string): string {
    const dir = home();
    writeFileSync(join(dir, "notpem.pem"), "this is not a certificate\n");
    writeFileSync(
      join(dir, "broken.pem"),
      "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
    );
    mkdirSync(join(dir, "certs"));
    return writeConfig(dir, `version: 1\nupstream_ca: [./${file}]\n`);
  }

  it.each(cases)("check reports %s with the path and the fix", (_what, file, message) => {
    const r = cli(["check", "--home", home(), "--config", ruleFile(file)], {
      env: { OPENAI_API_KEY: REAL_OPENAI },
    });
    expectNoCrash(r, file);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(message);
  });

  it.each(cases)("start refuses %s the same way, before listening", async (_what, file, message) => {
    const r = await cliAsync(["start", "--home", home(), "--config", ruleFile(file), "--port", "0"], {
      env: { OPENAI_API_KEY: REAL_OPENAI },
    });
    expectNoCrash(r, file);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).not.toContain("listening");
  });

  it("accepts a real CA file", async () => {
    const upstream = await startUpstream();
    try {
      const config = writeConfig(home(), `version: 1\nupstream_ca: ${JSON.stringify(upstream.caPath)}\n`);
      const r = cli(["check", "--home", home(), "--config", config], {
        env: { OPENAI_API_KEY: REAL_OPENAI },
      });
      expect(r.stderr).toBe("");
      expect(r.status).toBe(0);
    } finally {
      await upstream.close();
    }
  });
});

describe("a fleet's Redis password with no value", () => {
  it("check names it with where to set it; start stops with the same fix, not a stack trace", async () => {
    const config = writeConfig(
      tempHome(),
      'version: 1\nstate: { url: "redis://127.0.0.1:1/0", password: env:KB_FLEET_REDIS_PW }\n',
    );
    const env = { OPENAI_API_KEY: REAL_OPENAI };
    const check = cli(["check", "--home", tempHome(), "--config", config], { env });
    expectNoCrash(check, "check");
    expect(check.status).toBe(1);
    expect(check.stderr).toContain(
      "problem: state.password env:KB_FLEET_REDIS_PW has no value: export KB_FLEET_REDIS_PW",
    );
    const start = await cliAsync(["start", "--home", tempHome(), "--config", config, "--port", "0"], { env });
    expectNoCrash(start, "start");
    expect(start.status).toBe(1);
    expect(start.stderr).toContain("set KB_FLEET_REDIS_PW in the broker's environment");
  });
});

describe("bad logging variables are usage errors", () => {
  it.each([
    [
      "KEYBROKER_LOG_LEVEL",
      "verbose",
      /KEYBROKER_LOG_LEVEL="verbose" is not one of fatal, error, warn, info, debug, trace, silent/,
    ],
    ["KEYBROKER_LOG_FORMAT", "fancy", /KEYBROKER_LOG_FORMAT="fancy" is not one of pretty, json/],
    ["KEYBROKER_ACCESS_LOG", "maybe", /KEYBROKER_ACCESS_LOG="maybe" is not one of 1, 0/],
  ])("%s=%s", async (name, value, message) => {
    const r = await cliAsync(["start", "--home", home(), "--port", "0"], {
      env: { [name]: value, OPENAI_API_KEY: REAL_OPENAI },
    });
    expectNoCrash(r, name);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).not.toContain("listening");
  });

  it("a log level in capitals is accepted", () => {
    const r = cli(["check", "--home", home()], {
      env: { KEYBROKER_LOG_LEVEL: "DEBUG", OPENAI_API_KEY: REAL_OPENAI },
    });
    expect(r.status).toBe(0);
  });
});

describe("fuzz: every command with empty, missing, mistyped and misplaced values", () => {
  const dir = tempHome();
  homes.push(dir);
  const file = join(dir, "a-file");
  writeFileSync(file, "not a folder\n");
  const folder = join(dir, "a-folder");
  mkdirSync(folder);
  const garbage = writeConfig(dir, "version: 1\nproviders: [\n", "garbage.yaml");
  const binary = join(dir, "binary.yaml");
  writeFileSync(binary, Buffer.from([0, 1, 2, 255, 254, 0, 10]));
  const unreadable = writeConfig(dir, "version: 1\n", "unreadable.yaml");
  chmodSync(unreadable, 0o000);
  const root = process.getuid?.() === 0; // root reads any file: that case is then an ordinary one
  const h = join(dir, "home");

  const commands = [
    ["init"],
    ["start", "--port", "0"],
    ["stop"],
    ["run", "--", process.execPath, "-e", "0"],
    ["env"],
    ["ca", "path"],
    ["ca", "bundle"],
    ["check"],
    ["status"],
    ["auth", "list"],
    ["redact"],
    ["audit", "verify"],
    ["audit", "tail"],
  ];
  // [extra arguments, the exit codes that make sense]
  const variations: [string[], number[]][] = [
    [["--home", ""], [2]],
    [["--config", ""], [2]],
    [["--home"], [2]],
    [["--bogus"], [2]],
    [["--hmoe", h], [2]],
    [
      ["--home", file],
      [0, 1, 3],
    ],
    [
      ["--home", join(file, "below")],
      [0, 1, 3],
    ],
    [
      ["--config", folder],
      [1, 3],
    ],
    [
      ["--config", join(dir, "missing.yaml")],
      [1, 3],
    ],
    [
      ["--config", garbage],
      [1, 3],
    ],
    [
      ["--config", binary],
      [1, 3],
    ],
    ...(root
      ? []
      : ([
          [
            ["--config", unreadable],
            [1, 3],
          ],
        ] as [string[], number[]][])),
  ];
  // Every command meets two of the variations, in turn, so that each variation meets several
  // commands: the whole cross product takes minutes on a loaded machine for little more.
  const table = commands.flatMap((command, i) =>
    [variations[(2 * i) % variations.length]!, variations[(2 * i + 1) % variations.length]!].map(
      ([extra, codes]) => {
        const dash = command.indexOf("--");
        const args =
          dash === -1
            ? [...command, ...extra]
            : [...command.slice(0, dash), ...extra, ...command.slice(dash)];
        // The CA, the audit log, init and stop never read the rule file: they refuse --config
        // rather than ignore it (decision 144).
        const ignoresRules = ["ca", "audit", "init", "stop"].includes(command[0]!) && extra[0] === "--config";
        return { args, codes: ignoresRules && extra.length > 1 ? [2] : codes };
      },
    ),
  );
  table.push(
    { args: ["start", "--port", "abc"], codes: [2] },
    { args: ["start", "--port", "70000"], codes: [2] },
    { args: ["start", "--prot", "1"], codes: [2] },
    { args: ["stop", "--port", "x"], codes: [2] },
    { args: ["stop", "--timeout", "-1"], codes: [2] },
    { args: ["env", "--format", "xml"], codes: [2] },
    { args: ["env", "--client", "nosuch"], codes: [1] },
    { args: ["run"], codes: [2] },
    { args: ["run", "--", join(dir, "no-such-program")], codes: [127] },
    { args: ["run", "--client", "nosuch", "--", process.execPath, "-e", "0"], codes: [1] },
    { args: ["run", "ls"], codes: [2] },
    { args: ["ca", "nonsense"], codes: [2] },
    { args: ["auth", "nonsense"], codes: [2] },
    { args: ["auth", "reset", "nosuch"], codes: [1, 2] },
    { args: ["audit", "tail", "-n", "x"], codes: [2] },
    { args: ["audit", "verify", "--follow"], codes: [2] },
    { args: ["redact", "extra"], codes: [2] },
    { args: ["frobnicate"], codes: [2] },
    { args: [""], codes: [2] },
    { args: ["--config"], codes: [2] },
  );

  it(`${table.length} invocations: a message and a sensible exit code each, never a stack trace`, async () => {
    const failures: string[] = [];
    const queue = [...table];
    const worker = async () => {
      for (let item = queue.shift(); item !== undefined; item = queue.shift()) {
        const r = await runProcess(process.execPath, [CLI, ...item.args], {
          env: { KEYBROKER_HOME: h, OPENAI_API_KEY: REAL_OPENAI },
          cwd: dir,
          deadlineMs: DEADLINE_MS,
        });
        const what = `keybroker ${item.args.join(" ")} → ${r.status}`;
        const text = r.stdout + r.stderr;
        if (r.status === null) failures.push(`${what}: still running after ${DEADLINE_MS / 1000}s`);
        else if (text.includes("internal error") || /^\s+at .+:\d+:\d+\)?$/m.test(text))
          failures.push(`${what}: crashed:\n${r.stderr}`);
        else if (!item.codes.includes(r.status ?? -1))
          failures.push(`${what}, expected ${item.codes.join(" or ")}:\n${r.stderr}`);
        else if (r.status !== 0 && r.stderr.trim() === "") failures.push(`${what} with no message`);
      }
    };
    await Promise.all([worker(), worker(), worker()]);
    expect(failures).toEqual([]);
  }, 400_000);
});
