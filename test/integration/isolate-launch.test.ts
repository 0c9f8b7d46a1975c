// What passes through `keybroker run --isolate` unchanged (docs/spec.md §20): the exit code, Ctrl-C
// (SIGINT to run: 130, nothing left running), a terminal an interactive program drives, stdin;
// each launch's own identity in the audit log and status; --allow-connect to a server that
// speaks first (as SSH does); the unprivileged path (as nobody); and what run says without it.
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  assertNobodyCanRunTheCli,
  CLI,
  type CliResult,
  cliAsync,
  findSecrets,
  runProcess,
  tempHome,
} from "../helpers/broker.js";
import { type Fixture, nobodyFiles, REAL_OPENAI, rulesFor, startFixture } from "../helpers/fixture.js";
import { until } from "../helpers/fleet.js";
import { startUpstream } from "../helpers/upstream.js";

let f: Fixture;
let config: string;
/** An SSH-like server on the host's loopback: it speaks first, then echoes. */
let echo: Server;

const CURL = `curl -sS -o /dev/null -w '%{http_code}' -X POST https://api.openai.com/v1/chat/completions -H "Authorization: Bearer $OPENAI_API_KEY" -d '{}'`;

beforeAll(async () => {
  echo = createServer((s) => {
    s.on("error", () => {});
    s.write("SSH-2.0-kb-test\r\n");
    s.pipe(s);
  });
  await new Promise<void>((resolve) => echo.listen(0, "127.0.0.1", resolve));
  const echoPort = (echo.address() as { port: number }).port;
  f = await startFixture({
    rules: (u) =>
      rulesFor(u, '      - deny: { method: GET, path: "/user", launch: [sh] }\n').replace(
        "resolve:\n",
        `resolve:\n  "git.test:2222": "127.0.0.1:${echoPort}"\n`,
      ),
  });
  config = join(f.dir, "keybroker.yaml");
});

/** Runs a test started: any still running when the file ends (a failed test) is stopped. */
const spawned: ChildProcess[] = [];

afterAll(async () => {
  for (const c of spawned) if (c.exitCode === null && c.signalCode === null) c.kill("SIGINT");
  echo?.close();
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

/** `run --isolate` of this file's broker, home and rule file, with `command` after the `--`. */
function isolateArgs(command: string[], extra: string[] = []): string[] {
  return ["run", "--isolate", ...extra, "--home", f.home, "--config", config, "--", ...command];
}

function isolated(command: string[], opts: { env?: Record<string, string>; extra?: string[] } = {}) {
  return cliAsync(isolateArgs(command, opts.extra), opts.env === undefined ? {} : { env: opts.env });
}

/** Starts run with piped stdio; `lines` resolves each time stdout has a line matching. */
function started(args: string[]): {
  child: ChildProcess;
  out: () => string;
  waitFor(re: RegExp): Promise<void>;
} {
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ["pipe", "pipe", "pipe"] });
  spawned.push(child);
  let out = "";
  let err = "";
  child.stdout!.on("data", (d: Buffer) => {
    out += d.toString();
  });
  child.stderr!.on("data", (d: Buffer) => {
    err += d.toString();
  });
  return {
    child,
    out: () => `${out}\n--- stderr ---\n${err}`,
    waitFor: (re) =>
      new Promise<void>((resolve, reject) => {
        const check = () => {
          if (re.test(out)) {
            child.stdout!.off("data", check);
            resolve();
          }
        };
        child.stdout!.on("data", check);
        child.once("exit", () => reject(new Error(`run exited before ${re}: ${out}\n${err}`)));
        check();
      }),
  };
}

function auditLines(): Record<string, unknown>[] {
  return readFileSync(join(f.home, "audit", "audit.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** Processes of the host whose command line is `argv`. */
function processesWith(argv: string[]): number[] {
  const found: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, "utf8") === `${argv.join("\0")}\0`) found.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

describe("run --isolate passes through", () => {
  it("the command's exit code", async () => {
    const r = await isolated(["sh", "-c", "exit 7"]);
    expect(r.status, r.stderr).toBe(7);
  });

  it("SIGINT to run: exit 130, and nothing of the launch left running", async () => {
    const marker = `1234.${process.pid}`;
    const run = started(isolateArgs(["sh", "-c", `sleep ${marker} & echo started; wait`]));
    await run.waitFor(/started/);
    // The sleep is running (sh may echo before it has exec'd it).
    await until(async () => processesWith(["sleep", marker]).length === 1, "the sleep to start");
    const exited = once(run.child, "exit");
    run.child.kill("SIGINT");
    const [code] = (await exited) as [number | null];
    expect(code, run.out()).toBe(130);
    expect(processesWith(["sleep", marker])).toEqual([]);
  });

  it("run killed outright: the launch ends with it, nothing left running", async () => {
    const marker = `4321.${process.pid}`;
    const run = started(isolateArgs(["sh", "-c", `sleep ${marker} & echo "started $SSL_CERT_FILE"; wait`]));
    await run.waitFor(/started \S+\n/);
    // The launch's own folder (the CA bundle copy): run can no longer remove it, the jail does.
    const folder = dirname(dirname(/started (\S+)/.exec(run.out())![1]!));
    expect(existsSync(folder)).toBe(true);
    await until(async () => processesWith(["sleep", marker]).length === 1, "the sleep to start");
    run.child.kill("SIGKILL");
    // Bounds, not timings: once seen past 20 s on a machine running several suites at once.
    await until(
      async () => processesWith(["sleep", marker]).length === 0,
      "the launch's processes to end",
      60_000,
    );
    await until(async () => !existsSync(folder), "the launch's folder to go", 60_000);
  }, 150_000);

  it("a terminal: a full-screen program in raw mode on a pty reads keys as typed, Ctrl-C included", async () => {
    // What an agent's TUI does: raw mode, its own prompt, Ctrl-C read as a key (0x03).
    const tui = `const i = process.stdin;
if (!i.isTTY) { console.log("no tty"); process.exit(9); }
i.setRawMode(true);
process.stdout.write("kb-prompt> ");
let typed = "";
i.on("data", (d) => { for (const c of d.toString()) {
  if (c === "\\x03") { process.stdout.write("[typed " + typed + "]"); process.exit(5); }
  typed += c; process.stdout.write(c);
} });`;
    const driver = `
import json, os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
seen = b""
def until(needle):
    global seen
    deadline = time.time() + 30
    while needle not in seen and time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 1)
        if r:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    return needle in seen
prompt = until(b"kb-prompt> ")
os.write(fd, b"hi")
echoed = until(b"hi")
os.write(fd, b"\x03")
done = until(b"[typed hi]")
_, status = os.waitpid(pid, 0)
print(json.dumps({"prompt": prompt, "echoed": echoed, "done": done, "code": os.waitstatus_to_exitcode(status)}))
`;
    const r = await runProcess("python3", [
      "-c",
      driver,
      process.execPath,
      CLI,
      ...isolateArgs([]),
      process.execPath,
      "-e",
      tui,
    ]);
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout.trim().split("\n").at(-1)!)).toEqual({
      prompt: true,
      echoed: true,
      done: true,
      code: 5,
    });
  });
});

describe("each launch has its own identity", () => {
  it("two launches at once are attributed apart in the audit log and named by status while they run", async () => {
    const first = started(isolateArgs(["sh", "-c", `echo ready; read word; echo "got $word"; ${CURL}`]));
    await first.waitFor(/ready/);
    const status = await f.cli(["status", "--json"]);
    const launches = JSON.parse(status.stdout).launches as { id: string; command: string; client: string }[];
    const mine = launches.filter((l) => l.command.startsWith("sh -c 'echo ready; read word;"));
    expect(mine).toHaveLength(1);
    expect(mine[0]!.client).toBe("default");
    const human = await f.cli(["status"]);
    expect(human.stdout).toContain(`launch ${mine[0]!.id}  client default  since `);
    const metrics = await (await fetch(`${f.broker.url}/metrics`)).text();
    expect(metrics).toContain(
      `keybroker_launch_start_time_seconds{launch="${mine[0]!.id}",client="default",command="sh -c `,
    );
    const second = await isolated(["sh", "-c", CURL]);
    expect(second.status, second.stderr).toBe(0);
    expect(second.stdout).toBe("200");
    first.child.stdin!.end("hello\n");
    const [code] = (await once(first.child, "exit")) as [number];
    expect(code, first.out()).toBe(0);
    expect(first.out()).toContain("got hello\n200");

    const lines = auditLines();
    const ids = mine.map((l) => l.id);
    const injected = lines.filter((l) => l.decision === "injected" && l.launch !== undefined);
    const byLaunch = new Map<unknown, number>();
    for (const l of injected.slice(-2)) byLaunch.set(l.launch, (byLaunch.get(l.launch) ?? 0) + 1);
    expect(byLaunch.size).toBe(2);
    expect(byLaunch.has(ids[0])).toBe(true);
    for (const id of byLaunch.keys()) {
      const start = lines.find((l) => l.decision === "launch_started" && l.launch === id);
      expect(start?.reason).toMatch(/^sh -c .* \(started \d{4}-/);
      // The audit line of the launch's end is written as the broker answers run's revocation.
      await until(
        async () => auditLines().some((l) => l.decision === "launch_ended" && l.launch === id),
        `the end of launch ${String(id)} in the audit log`,
      );
    }
    // Gone from status once they exit.
    const after = await f.cli(["status", "--json"]);
    const still = (JSON.parse(after.stdout).launches as { id: string }[]).map((l) => l.id);
    for (const id of byLaunch.keys()) expect(still).not.toContain(id);
  });
});

describe("policy rules scoped by launch:", () => {
  it("apply to isolated launches of the named command only", async () => {
    const user = `curl -sS -o /dev/null -w '%{http_code}' -u "x-access-token:$GITHUB_TOKEN" https://api.github.com/user`;
    const bySh = await isolated(["sh", "-c", user]);
    expect(bySh.stdout, bySh.stderr).toBe("403");
    // Another command, and the same command not isolated (no launch): the rule does not apply.
    const byEnv = await isolated(["env", "sh", "-c", user]);
    expect(byEnv.stdout, byEnv.stderr).toBe("200");
    const plain = await cliAsync([
      "run",
      "--no-isolate",
      "--home",
      f.home,
      "--config",
      config,
      "--",
      "sh",
      "-c",
      user,
    ]);
    expect(plain.stdout, plain.stderr).toBe("200");
  });
});

describe("--allow-connect", () => {
  const talk = `node -e '
const s = require("net").connect(2222, "git.test");
let got = "";
s.on("data", (d) => { got += d; if (got.includes("\\n") && !got.includes("ping")) s.write("ping\\n"); if (got.includes("ping\\n")) { console.log(JSON.stringify(got)); s.end(); } });
s.on("error", (e) => { console.log(e.code); });
'`;

  it("lets a server that speaks first be reached by its name, through the broker's tunnel, audited", async () => {
    const r = await isolated(["sh", "-c", talk], { extra: ["--allow-connect", "git.test:2222"] });
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout.trim())).toBe("SSH-2.0-kb-test\r\nping\n");
    const tunnel = auditLines().filter((l) => l.method === "CONNECT" && l.host === "git.test:2222");
    expect(tunnel.at(-1)).toMatchObject({ decision: "passthrough", status: 200 });
    expect(tunnel.at(-1)?.launch).toMatch(/^[0-9a-f]+$/);
  });

  it("without it, the name does not even resolve", async () => {
    const r = await isolated(["sh", "-c", talk]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toMatch(/^E[A-Z]+/);
  });
});

describe("without --isolate", () => {
  const printEnv = [process.execPath, "-e", "process.stdout.write(JSON.stringify(process.env))"];

  it("run says in one line what the command can still read, and passes no KEYBROKER_* variable", async () => {
    const r = await cliAsync(["run", "--home", f.home, "--config", config, "--", ...printEnv], {
      env: { KEYBROKER_HOME: f.home, KEYBROKER_LOG_LEVEL: "warn" },
    });
    expect(r.status, r.stderr).toBe(0);
    const notice = r.stderr.split("\n").filter((l) => l.includes("not isolated"));
    expect(notice).toHaveLength(1);
    expect(notice[0]).toContain("--isolate");
    const env = JSON.parse(r.stdout) as Record<string, string>;
    expect(Object.keys(env).filter((k) => k.startsWith("KEYBROKER_"))).toEqual([]);
  });

  it("--no-isolate, or run: { isolate: false } in the rule file, silences it; isolate: true makes it the default", async () => {
    const quiet = await cliAsync(["run", "--no-isolate", "--home", f.home, "--config", config, "--", "true"]);
    expect(quiet.status, quiet.stderr).toBe(0);
    expect(quiet.stderr).not.toContain("not isolated");
    const dir = tempHome();
    const own = (isolate: boolean) => {
      const path = join(dir, `isolate-${isolate}.yaml`);
      writeFileSync(path, `${readFileSync(config, "utf8")}\nrun: { isolate: ${isolate} }\n`);
      return path;
    };
    const known = await cliAsync(["run", "--home", tempHome(), "--config", own(false), "--", "true"]);
    expect(known.status, known.stderr).toBe(0);
    expect(known.stderr).not.toContain("not isolated");
    // isolate: true: a PID namespace of its own, whose PID 1 is the launch's relay.
    const byDefault = await cliAsync([
      "run",
      "--home",
      tempHome(),
      "--config",
      own(true),
      "--",
      "cat",
      "/proc/1/cmdline",
    ]);
    expect(byDefault.status, byDefault.stderr).toBe(0);
    expect(byDefault.stdout).toContain("isolate/jail.js");
  });
});

describe("unprivileged: run --isolate as the user nobody", () => {
  it("isolates with user namespaces alone, and the request still gets the real key", async () => {
    await assertNobodyCanRunTheCli();
    const upstream = await startUpstream();
    const dir = tempHome();
    const { config, work, home } = nobodyFiles(upstream, dir);
    let r: CliResult;
    try {
      r = await runProcess(
        "runuser",
        [
          "-u",
          "nobody",
          "--",
          "env",
          `HOME=${work}`,
          `OPENAI_API_KEY=${REAL_OPENAI}`,
          process.execPath,
          CLI,
          "run",
          "--isolate",
          "--home",
          home,
          "--config",
          config,
          "--",
          "sh",
          "-c",
          `id -u; ls -A ${home} | wc -l; ${CURL}`,
        ],
        { cwd: work },
      );
    } finally {
      await upstream.close();
    }
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.split("\n")).toEqual(["65534", "0", "200"]);
    expect(upstream.received.at(-1)?.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    expect(findSecrets([REAL_OPENAI], [home], [r.stdout, r.stderr])).toEqual([]);
  });
});
