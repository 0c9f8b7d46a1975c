// The first process of an isolated launch (decision 115): `unshare` starts it as PID 1 of new
// user, mount, PID and network namespaces, root of its user namespace. It brings loopback up,
// hides the broker's files, starts the relays to the broker, then runs the agent in one more
// user and mount namespace as the user's own uid: there the mounts made here are locked (the
// agent cannot unmount them to see what they hide) and it holds no capability over them. It
// stays as the relay until the agent exits, and exits with the agent's status; the kernel then
// ends every process left in the PID namespace.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { Socket } from "node:net";
import { constants } from "node:os";
import { join } from "node:path";
import type { JailPlan } from "./plan.js";
import { connectRelay, relay } from "./relay.js";

/** The control channel from `run`: signals to pass on, one name a line; "ready" goes back. */
const CONTROL_FD = 3;

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

/** The Basic credentials of the proxy URL the agent got, for the CONNECTs of --allow-connect. */
function proxyAuthorization(): string | undefined {
  const url = process.env.HTTPS_PROXY;
  if (url === undefined) return undefined;
  const u = new URL(url);
  if (u.username === "") return undefined;
  const pair = `${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`;
  return `Basic ${Buffer.from(pair).toString("base64")}`;
}

async function main(): Promise<void> {
  const plan = JSON.parse(readFileSync(process.argv[2] ?? "", "utf8")) as JailPlan;
  const control = new Socket({ fd: CONTROL_FD, readable: true, writable: true });
  control.on("error", () => {});
  // The namespaces exist: whatever fails from here says why itself.
  control.write("up\n");
  must("ip", ["link", "set", "lo", "up"]);
  hide(plan);
  bindHosts(plan);
  const toBroker = () => new Socket().connect(plan.socket);
  try {
    await relay({ host: "127.0.0.1", port: plan.port }, toBroker);
    const auth = proxyAuthorization();
    for (const a of plan.allow) {
      await connectRelay({ host: a.address, port: a.port }, plan.socket, `${a.host}:${a.port}`, auth);
    }
  } catch (err) {
    fail(`cannot listen inside the namespace: ${(err as Error).message}`);
  }

  // Signals a terminal sends reach the agent by itself; PID 1 only has to outlive it.
  for (const s of ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"] as const) process.on(s, () => {});
  const child = spawn(
    "unshare",
    ["--user", `--map-user=${plan.uid}`, `--map-group=${plan.gid}`, "--mount", "--", ...plan.command],
    {
      stdio: "inherit",
      cwd: plan.cwd,
      env: plan.nodeOptions === undefined ? process.env : { ...process.env, NODE_OPTIONS: plan.nodeOptions },
    },
  );
  let buffered = "";
  control.on("data", (chunk: Buffer) => {
    buffered += chunk.toString("latin1");
    let nl = buffered.indexOf("\n");
    while (nl !== -1) {
      const name = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      if (/^SIG[A-Z]+$/.test(name) && name in constants.signals) child.kill(name as NodeJS.Signals);
      nl = buffered.indexOf("\n");
    }
  });
  child.once("spawn", () => control.write("ready\n"));
  child.once("error", (err) => fail(`cannot start unshare: ${(err as NodeJS.ErrnoException).code}`));
  child.once("exit", (status, signal) => {
    process.exit(status ?? 128 + (signal ? (constants.signals[signal] ?? 1) : 1));
  });
}

void main();
