// `run --isolate` beside a running broker (decision 139): the broker listens inside the launch's
// network namespace itself, so the agent's connections reach it with no relay: they still work
// while `run` (which used to relay them) is stopped; status shows the launch `direct`; a second
// request, a wrong token or a process that is not the launch's jail is refused; the listener is
// closed once the launch ends; and a broker that cannot enter the namespace (no nsenter) leaves
// the relay in place, which `run` says in one line.
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { assertNobodyCanRunTheCli, CLI, findSecrets, runProcess } from "../helpers/broker.js";
import { type Fixture, nobodyFiles, REAL_OPENAI, rulesFor, startFixture } from "../helpers/fixture.js";
import { until } from "../helpers/fleet.js";
import { startUpstream } from "../helpers/upstream.js";

const CURL = `curl -sS --max-time 20 -o /dev/null -w '%{http_code}' -X POST https://api.openai.com/v1/chat/completions -H "Authorization: Bearer $OPENAI_API_KEY" -d '{}'`;

let f: Fixture;
/** A broker whose PATH has no nsenter: it cannot listen inside a launch. */
let noNsenter: Fixture;
const emptyPath = mkdtempSync(join(tmpdir(), "kb-no-nsenter-"));
const spawned: ChildProcess[] = [];

beforeAll(async () => {
  f = await startFixture({ rules: (u) => rulesFor(u) });
  noNsenter = await startFixture({ rules: (u) => rulesFor(u), upstreamEnv: () => ({ PATH: emptyPath }) });
});

afterAll(async () => {
  for (const c of spawned) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  await f?.close();
  await noNsenter?.close();
  rmSync(emptyPath, { recursive: true, force: true });
  expect(f.leaks()).toEqual([]);
  expect(noNsenter.leaks()).toEqual([]);
});

/** The fixture's `run --isolate -- sh -c script`, started; resolves once the agent said `started`. */
function launch(fx: Fixture, script: string) {
  return launchWith(process.execPath, [CLI], fx.home, join(fx.dir, "keybroker.yaml"), script);
}

/** The children of a process, from /proc (none when it is gone). */
function childrenOf(pid: number): number[] {
  try {
    const text = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim();
    return text === "" ? [] : text.split(" ").map(Number);
  } catch {
    return [];
  }
}

/** The `keybroker <command>` process at or under `pid` (runuser may start it as its child). */
function keybrokerUnder(pid: number, command = "run"): number {
  const queue = [pid];
  while (queue.length > 0) {
    const p = queue.shift()!;
    const args = readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0");
    if (args.includes(CLI) && args.includes(command)) return p;
    queue.push(...childrenOf(p));
  }
  throw new Error(`no keybroker ${command} under process ${pid}`);
}

/** `cmd ...prefix run --isolate --home H --config C -- sh -c script`, as `launch` does. */
async function launchWith(cmd: string, prefix: string[], home: string, config: string, script: string) {
  const child = spawn(
    cmd,
    [
      ...prefix,
      ...["run", "--isolate", "--home", home, "--config", config, "--"],
      ...["sh", "-c", `echo "started $HTTPS_PROXY"; ${script}`],
    ],
    { stdio: ["pipe", "pipe", "pipe"] },
  );
  spawned.push(child);
  let out = "";
  let err = "";
  child.stdout!.on("data", (d: Buffer) => {
    out += d.toString();
  });
  child.stderr!.on("data", (d: Buffer) => {
    err += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  await until(async () => /started \S+\n/.test(out) || child.exitCode !== null, "the agent to start", 30_000);
  if (!/started \S+\n/.test(out)) throw new Error(`run exited: ${out}\n${err}`);
  const proxy = new URL(/started (\S+)/.exec(out)![1]!);
  const run = keybrokerUnder(child.pid!);
  return {
    child,
    run,
    exited,
    out: () => out,
    err: () => err,
    id: decodeURIComponent(proxy.username).replace(/^launch-/, ""),
    token: decodeURIComponent(proxy.password),
    /** `unshare`, run's child: in the launch's user and network namespaces. */
    jail: childrenOf(run)[0]!,
  };
}

/** Stops `run` (the relay before decision 139), lets the agent curl, waits for its answer. */
async function curlWithRunStopped(l: Awaited<ReturnType<typeof launchWith>>): Promise<void> {
  process.kill(l.run, "SIGSTOP");
  try {
    l.child.stdin!.write("go\n");
    await until(async () => /\n\d{3}\n/.test(l.out()), "the agent's request", 30_000);
  } finally {
    process.kill(l.run, "SIGCONT");
  }
}

async function status(fx: Fixture): Promise<{ id: string; direct?: boolean }[]> {
  const r = await fx.cli(["status", "--json"]);
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout).launches;
}

/** POST launches/<id>/listen on the admin API, as run asks it; the answer's status and body. */
function askListen(fx: Fixture, id: string, body: unknown): Promise<{ status: number; text: string }> {
  return admin(fx, `launches/${id}/listen`, body);
}

/** A POST to the fixture's admin API with its admin token. */
async function admin(fx: Fixture, action: string, body: unknown): Promise<{ status: number; text: string }> {
  const token = readFileSync(join(fx.home, "admin.token"), "utf8").trim();
  const res = await fetch(`${fx.broker.url}/__keybroker/admin/${action}`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

/** The TCP listeners of a network namespace, held open by `fd` of this process (`ss -Hltn`). */
async function listenersIn(fd: number): Promise<string> {
  const r = await runProcess("nsenter", [`--net=/proc/${process.pid}/fd/${fd}`, "--", "ss", "-Hltn"]);
  expect(r.status, r.stderr).toBe(0);
  return r.stdout.trim();
}

describe("run --isolate: the running broker listens inside the launch", () => {
  it("serves the agent with no relay: run stopped, the request still gets through; refused twice; closed at the end", async () => {
    const l = await launch(f, `read go; ${CURL}; echo`);
    // The launch's network namespace, held open here to look into it after the launch ended.
    const netns = openSync(`/proc/${l.jail}/ns/net`, "r");
    try {
      expect((await status(f)).find((x) => x.id === l.id)?.direct).toBe(true);
      expect(await listenersIn(netns)).toContain(`127.0.0.1:${f.broker.port}`);

      // A second request for the same launch is refused, and so is a wrong token.
      const again = await askListen(f, l.id, { token: l.token, pid: l.jail });
      expect(again.status).toBe(400);
      expect(again.text).toContain("already has its listener");
      const wrong = await askListen(f, l.id, { token: `${l.token}x`, pid: l.jail });
      expect(wrong.status).toBe(400);
      expect(wrong.text).toContain("no launch");

      // run, which relayed the agent's connections before, is frozen: the agent still gets through.
      await curlWithRunStopped(l);
      expect(l.out()).toMatch(/\n200\n/);
      expect(f.upstream.received.at(-1)?.headers.authorization).toMatch(/^Bearer sk-/);
      expect(l.err()).not.toContain("relay");
      expect(await l.exited).toBe(0);

      // The launch is over: the broker's listener in its namespace is closed.
      await until(async () => !(await status(f)).some((x) => x.id === l.id), "the launch to end");
      expect(await listenersIn(netns)).toBe("");
    } finally {
      closeSync(netns);
    }
  });

  it("closes the listener when the broker ends a launch whose run was killed", async () => {
    const l = await launch(f, `sleep 4567.${process.pid}`);
    const netns = openSync(`/proc/${l.jail}/ns/net`, "r");
    try {
      // The broker's listener, not run's: run's would go with run.
      expect((await status(f)).find((x) => x.id === l.id)?.direct).toBe(true);
      expect(await listenersIn(netns)).toContain(`127.0.0.1:${f.broker.port}`);
      process.kill(l.run, "SIGKILL");
      // The broker's sweep (every 2 s) sees run gone and ends the launch (decision 136).
      await until(async () => !(await status(f)).some((x) => x.id === l.id), "the launch to end", 20_000);
      expect(await listenersIn(netns)).toBe("");
    } finally {
      closeSync(netns);
    }
  });

  it("refuses a process that is not the launch's jail, and a launch whose run it cannot see", async () => {
    // A launch tied to this process, as run ties one to itself (decision 136).
    const stat = readFileSync(`/proc/${process.pid}/stat`, "utf8");
    const start = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
    const minted = await admin(f, "launches", { client: "default", command: "t", pid: process.pid, start });
    expect(minted.status, minted.text).toBe(200);
    const tied = JSON.parse(minted.text) as { id: string; token: string };
    // A child of the launch's run (this process) in the broker's own namespaces; then pid 1.
    const sleeper = spawn("sleep", ["30"], { stdio: "ignore" });
    spawned.push(sleeper);
    try {
      const sameNet = await askListen(f, tied.id, { token: tied.token, pid: sleeper.pid });
      expect(sameNet.status).toBe(400);
      expect(sameNet.text).toContain(`process ${sleeper.pid} is not in a network namespace of its own`);
      const other = await askListen(f, tied.id, { token: tied.token, pid: 1 });
      expect(other.status).toBe(400);
      expect(other.text).toContain("process 1 is not a child of the launch's run");
      const bad = await askListen(f, tied.id, { token: tied.token, pid: "1" });
      expect(bad.status).toBe(400);
      expect(JSON.parse(bad.text).error.message).toContain('"pid" the process id of its jail');
    } finally {
      sleeper.kill("SIGKILL");
    }
    // Not tied to a process this broker sees: it cannot tell the launch's jail.
    const loose = JSON.parse((await admin(f, "launches", { client: "default", command: "t" })).text) as {
      id: string;
      token: string;
    };
    const unseen = await askListen(f, loose.id, { token: loose.token, pid: sleeper.pid });
    expect(unseen.status).toBe(400);
    expect(unseen.text).toContain("cannot see the launch's run");
    expect((await status(f)).filter((x) => x.direct === true)).toEqual([]);
  });

  it("falls back to run's relay when the broker cannot enter the namespace, and says so once", async () => {
    const l = await launch(noNsenter, `${CURL}; echo`);
    expect(await l.exited).toBe(0);
    expect(l.out()).toMatch(/\n200\n/);
    const said = l
      .err()
      .split("\n")
      .filter((line) => line.includes("relay"));
    expect(said).toHaveLength(1);
    expect(said[0]).toMatch(/go through run's relay: .*cannot run nsenter \(ENOENT\)/);
  });
});

describe("unprivileged: broker and run --isolate as the user nobody", () => {
  it("the broker enters the launch's user namespace and listens there: no relay", async () => {
    await assertNobodyCanRunTheCli();
    const upstream = await startUpstream();
    const dir = mkdtempSync(join(tmpdir(), "kb-direct-nobody-"));
    const { config, work, home } = nobodyFiles(upstream, dir);
    const asNobody = ["-u", "nobody", "--", "env", `HOME=${work}`, process.execPath, CLI];
    const broker = spawn(
      "runuser",
      [
        ...asNobody.slice(0, -2),
        `OPENAI_API_KEY=${REAL_OPENAI}`,
        process.execPath,
        CLI,
        "start",
        "--home",
        home,
        "--config",
        config,
        "--port",
        "0",
      ],
      { stdio: ["ignore", "pipe", "pipe"], cwd: work },
    );
    spawned.push(broker);
    try {
      let said = "";
      broker.stdout!.on("data", (d: Buffer) => {
        said += d.toString();
      });
      await until(
        async () => /listening on /.test(said) || broker.exitCode !== null,
        "the broker to start",
        30_000,
      );
      expect(said).toMatch(/listening on /);
      const l = await launchWith("runuser", asNobody, home, config, `read go; ${CURL}; echo`);
      const st = await runProcess("runuser", [
        ...asNobody,
        "status",
        "--json",
        "--home",
        home,
        "--config",
        config,
      ]);
      expect(st.status, st.stderr).toBe(0);
      expect(JSON.parse(st.stdout).launches.find((x: { id: string }) => x.id === l.id)?.direct).toBe(true);
      await curlWithRunStopped(l);
      expect(l.out()).toMatch(/\n200\n/);
      expect(upstream.received.at(-1)?.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
      expect(l.err()).not.toContain("relay");
      expect(await l.exited).toBe(0);
    } finally {
      process.kill(keybrokerUnder(broker.pid!, "start"), "SIGTERM");
      await once(broker, "exit");
      await upstream.close();
    }
    expect(findSecrets([REAL_OPENAI], [home])).toEqual([]);
    rmSync(dir, { recursive: true, force: true });
  });
});
