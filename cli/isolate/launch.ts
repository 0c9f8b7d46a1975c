// The outside of `run --isolate` (decision 115): the launch's private folder (a copy of the
// public CA bundle, the plan), then `unshare` starting cli/isolate/jail.ts as PID 1 of the new
// namespaces, with Node's IPC channel between them: the jail hands over the listeners it made
// inside, and `run` accepts the agent's connections on them; with a running broker, the broker
// is first asked to listen inside itself, so no relay is needed (decision 139). Signals `run` receives go to the
// agent over the same channel: `unshare` itself does not pass them on.
import { spawn } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { connect, Server, type Socket } from "node:net";
import { constants, tmpdir } from "node:os";
import { basename, join } from "node:path";
import { BUNDLE_FILE, bundleDirFor } from "../../certs/bundle.js";
import { builtFile } from "../../core/package-root.js";
import type { HiddenPaths } from "./hidden-paths.js";
import { type AllowedConnect, type JailMessage, type JailPlan, namespaceRefusal } from "./plan.js";
import { dropSocketVariables } from "./private-folders.js";
import { connectThrough, splice } from "./relay.js";

const JAIL = builtFile("cli/isolate/jail.js");

/** The launch's folder, made before the agent's variables (they name the bundle copy). */
export interface LaunchDir {
  readonly dir: string;
  /** The copy of the trust bundle (system roots + the keybroker CA; never the CA key). */
  readonly bundle: string;
  remove(): void;
}

export function makeLaunchDir(bundle: string): LaunchDir {
  const dir = mkdtempSync(join(tmpdir(), "keybroker-launch-"));
  const copy = join(dir, "ca", BUNDLE_FILE);
  cpSync(bundle, copy);
  if (existsSync(bundleDirFor(bundle))) cpSync(bundleDirFor(bundle), bundleDirFor(copy), { recursive: true });
  return { dir, bundle: copy, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

export interface IsolatedRun {
  readonly dir: LaunchDir;
  /** The broker's listener, as the proxy variables name it. */
  readonly broker: { readonly host: string; readonly port: number };
  /** Serves a connection from the agent in this process (run's own broker); else relayed to `broker`. */
  readonly accept: ((socket: Socket) => void) | undefined;
  /**
   * Asks the running broker to listen inside the launch itself (decision 139), given the pid of a
   * process in the launch's namespaces; rejects with why not, and `run` then relays.
   */
  readonly direct: ((pid: number) => Promise<unknown>) | undefined;
  /** The launch's Proxy-Authorization value, for the CONNECTs of --allow-connect. */
  readonly authorization: string;
  readonly hide: HiddenPaths;
  readonly allow: readonly AllowedConnect[];
  readonly command: readonly string[];
  readonly cwd: string;
  /** The agent's environment: placeholders and proxy variables set, secrets removed. */
  readonly env: NodeJS.ProcessEnv;
  readonly err: (line: string) => void;
}

/** Runs the command isolated; resolves with its exit status (1 when the jail could not be made). */
export async function runIsolated(r: IsolatedRun): Promise<number> {
  const emptyFile = join(r.dir.dir, "empty");
  writeFileSync(emptyFile, "", { mode: 0o444 });
  const env = { ...r.env };
  const sockets = dropSocketVariables(env);
  const plan: JailPlan = {
    dir: r.dir.dir,
    port: r.broker.port,
    hide: r.hide,
    emptyFile,
    sockets,
    allow: r.allow,
    uid: process.getuid?.() ?? 0,
    gid: process.getgid?.() ?? 0,
    command: r.command,
    cwd: r.cwd,
    nodeOptions: env.NODE_OPTIONS,
  };
  const planPath = join(r.dir.dir, "plan.json");
  writeFileSync(planPath, JSON.stringify(plan), { mode: 0o600 });
  const { NODE_OPTIONS: _agentOnly, ...jailEnv } = env;
  const child = spawn(
    "unshare",
    [
      "--user",
      "--map-root-user",
      "--mount",
      "--pid",
      "--fork",
      "--net",
      "--kill-child",
      "--mount-proc",
      "--",
      process.execPath,
      JAIL,
      planPath,
    ],
    { stdio: ["inherit", "inherit", "inherit", "ipc"], env: jailEnv },
  );
  const toBroker = () => connect(r.broker.port, r.broker.host);
  const send = (m: JailMessage) => {
    if (child.connected) child.send(m);
  };
  // `unshare` itself is in the launch's user and network namespaces (only the PID namespace is
  // its child's), and it is this process's child: the broker checks both.
  const askDirect = async (): Promise<boolean> => {
    if (r.direct === undefined || child.pid === undefined) return true;
    try {
      await r.direct(child.pid);
      return false;
    } catch (err) {
      r.err(
        `keybroker run --isolate: the agent's connections go through run's relay: ${(err as Error).message}`,
      );
      return true;
    }
  };
  const listeners: Server[] = [];
  let stage: "none" | "up" | "ready" = "none";
  child.on("message", (m: JailMessage, handle: unknown) => {
    if (m.type === "up" && stage === "none") stage = "up";
    else if (m.type === "ready") stage = "ready";
    else if (m.type === "net") void askDirect().then((relay) => send({ type: "listen", relay }));
    else if (handle instanceof Server) {
      listeners.push(handle);
      const allowed = m.type === "allow" ? r.allow[m.index] : undefined;
      handle.on("connection", (socket: Socket) => {
        if (allowed !== undefined)
          connectThrough(socket, toBroker(), `${allowed.host}:${allowed.port}`, r.authorization);
        else if (r.accept !== undefined) r.accept(socket);
        else splice(socket, toBroker());
      });
    }
  });
  const forward = (signal: NodeJS.Signals) => () => {
    if (stage === "ready") child.send({ type: "signal", signal } satisfies JailMessage);
    else child.kill("SIGKILL");
  };
  const handlers = (["SIGINT", "SIGTERM", "SIGHUP"] as const).map((s) => [s, forward(s)] as const);
  for (const [s, h] of handlers) process.on(s, h);
  try {
    const code = await new Promise<number>((resolve) => {
      child.once("error", (err) => {
        const code = (err as NodeJS.ErrnoException).code;
        r.err(
          `keybroker run --isolate: cannot run unshare (${code}): install util-linux 2.38 or later, which --isolate uses to make the namespaces`,
        );
        resolve(1);
      });
      child.once("exit", (status, signal) => {
        resolve(status ?? 128 + (signal ? (constants.signals[signal] ?? 1) : 1));
      });
    });
    if (stage === "none" && code !== 0) {
      r.err(`keybroker run --isolate: ${namespaceRefusal(process.getuid?.() ?? 0)}`);
      return 1;
    }
    return code;
  } finally {
    for (const [s, h] of handlers) process.off(s, h);
    for (const l of listeners) l.close();
    r.dir.remove();
  }
}

/** The command line as the audit log and `status` name a launch. */
export function commandLine(command: readonly string[]): string {
  return [basename(command[0] ?? ""), ...command.slice(1)]
    .map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", "'\\''")}'`))
    .join(" ");
}
