// The first process of an isolated launch (decision 115): `unshare` starts it as PID 1 of new
// user, mount, PID and network namespaces, root of its user namespace. It brings loopback up,
// hides the broker's files, listens where the proxy variables point, then runs the agent in one more
// user and mount namespace as the user's own uid: there the mounts made here are locked (the
// agent cannot unmount them to see what they hide) and it holds no capability over them. Its
// listeners go to `run` over the IPC channel (no relay in here), the proxy's only when the broker
// could not listen in here itself (decision 139); it passes on the signals `run`
// sends, and exits with the agent's status; the kernel then ends every process left in the PID
// namespace.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { constants } from "node:os";
import { basename, dirname, join } from "node:path";
import { packageRoot } from "../../core/package-root.js";
import type { JailMessage, JailPlan } from "./plan.js";
import { makePrivate } from "./private-folders.js";

function fail(message: string): never {
  process.stderr.write(`keybroker run --isolate: ${message}\n`);
  process.exit(1);
}

function must(cmd: string, args: readonly string[]): void {
  const r = spawnSync(cmd, args, { stdio: ["ignore", "ignore", "pipe"], encoding: "utf8" });
  if (r.error !== undefined) {
    const code = (r.error as NodeJS.ErrnoException).code;
    fail(`cannot run ${cmd} (${code}): install ${cmd === "ip" ? "iproute2" : "util-linux"}`);
  }
  if (r.status !== 0) fail(`${cmd} ${args.join(" ")} failed: ${r.stderr.trim()}`);
}

/** Hides what the plan names: an empty tmpfs over each folder, an empty file over each file. */
function hide(plan: JailPlan): void {
  for (const dir of plan.hide.folders) {
    // Gone from view already when under a folder the agent got of its own (a home in /tmp).
    if (!existsSync(dir)) continue;
    must("mount", ["-t", "tmpfs", "-o", "size=64k,mode=0700,nosuid,nodev,noexec", "keybroker-hidden", dir]);
  }
  for (const file of plan.hide.files) {
    if (statSync(file, { throwIfNoEntry: false })?.isFile() === true)
      must("mount", ["--bind", plan.emptyFile, file]);
  }
}

/** `--allow-connect` hosts resolve, inside, to the loopback address their relay listens on. */
function bindHosts(plan: JailPlan): void {
  if (plan.allow.length === 0 || !existsSync("/etc/hosts")) return;
  const lines = plan.allow.map((a) => `${a.address}\t${a.host}`).join("\n");
  const hosts = join(plan.dir, "hosts");
  writeFileSync(hosts, `${readFileSync("/etc/hosts", "utf8")}\n# keybroker run --allow-connect\n${lines}\n`, {
    mode: 0o644,
  });
  must("mount", ["--bind", hosts, "/etc/hosts"]);
}

/**
 * Tells `run` loopback is up and waits for its answer: whether it still needs the proxy listener
 * (true), or the broker now listens in here itself (decision 139). `run` gone meanwhile ends this.
 */
function relayWanted(): Promise<boolean> {
  return new Promise((resolve) => {
    const gone = () => process.exit(137);
    const onMessage = (m: JailMessage) => {
      if (m.type !== "listen") return;
      process.off("message", onMessage);
      process.off("disconnect", gone);
      resolve(m.relay);
    };
    process.on("message", onMessage);
    process.once("disconnect", gone);
    process.send?.({ type: "net" } satisfies JailMessage);
  });
}

/** Listens inside the namespace and hands the listener to `run`, which accepts on it. */
function handOver(message: JailMessage, host: string, port: number): Promise<void> {
  const server = createServer();
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      // run keeps its copy; this one is closed, so only run accepts.
      process.send?.(message, server, () => {
        server.close();
        resolve();
      });
    });
  });
}

async function main(): Promise<void> {
  const plan = JSON.parse(readFileSync(process.argv[2] ?? "", "utf8")) as JailPlan;
  // The namespaces exist: whatever fails from here says why itself.
  process.send?.({ type: "up" } satisfies JailMessage);
  must("ip", ["link", "set", "lo", "up"]);
  // The launch's folder as it is outside, to remove it from there should run be killed.
  const outside = openSync(dirname(plan.dir), "r");
  makePrivate(
    // keybroker itself stays visible too: the agent's NODE_OPTIONS preloads from it, wherever it
    // is installed (a clone under /tmp included).
    {
      uid: plan.uid,
      keep: [plan.cwd, plan.dir, packageRoot()],
      sockets: plan.sockets,
      emptyFile: plan.emptyFile,
    },
    (args) => must("mount", args),
  );
  hide(plan);
  bindHosts(plan);
  const relay = await relayWanted();
  try {
    if (relay) await handOver({ type: "proxy" }, "127.0.0.1", plan.port);
    for (const [index, a] of plan.allow.entries())
      await handOver({ type: "allow", index }, a.address, a.port);
  } catch (err) {
    fail(`cannot listen inside the namespace: ${(err as Error).message}`);
  }

  // Signals a terminal sends reach the agent by itself; PID 1 only has to outlive it.
  for (const s of ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"] as const) process.on(s, () => {});
  const env = { ...process.env };
  if (plan.nodeOptions !== undefined) env.NODE_OPTIONS = plan.nodeOptions;
  const child = spawn(
    "unshare",
    ["--user", `--map-user=${plan.uid}`, `--map-group=${plan.gid}`, "--mount", "--", ...plan.command],
    { stdio: "inherit", cwd: plan.cwd, env },
  );
  // run is gone (killed, so it could not pass a signal on): the agent must not outlive it.
  process.on("disconnect", () => {
    child.kill("SIGKILL");
    // Nor its folder, which run would have removed.
    rmSync(join(`/proc/${process.pid}/fd/${outside}`, basename(plan.dir)), { recursive: true, force: true });
    process.exit(137);
  });
  process.on("message", (m: JailMessage) => {
    if (m.type === "signal" && m.signal in constants.signals) child.kill(m.signal);
  });
  child.once("spawn", () => process.send?.({ type: "ready" } satisfies JailMessage));
  child.once("error", (err) => fail(`cannot start unshare: ${(err as NodeJS.ErrnoException).code}`));
  child.once("exit", (status, signal) => {
    process.exit(status ?? 128 + (signal ? (constants.signals[signal] ?? 1) : 1));
  });
}

void main();
