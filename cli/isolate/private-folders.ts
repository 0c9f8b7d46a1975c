// What an isolated agent gets of its own instead of the user's (decision 135): a network
// namespace hides abstract unix sockets only, and a socket file on the file system (a tmux
// server's, the user's D-Bus bus, docker.sock, the ssh agent) is a way out of the jail to a
// process outside. The folders where such sockets live get an empty tmpfs, with the working
// folder and the launch's own folder bound back at their paths when they are under one; socket
// files elsewhere in /run are covered with an empty file, as the variables naming sockets are
// removed from the agent's environment. A socket elsewhere (say in the project folder) stays
// reachable: docs/agents.md says so.
import { lstatSync, mkdirSync, openSync, readdirSync, realpathSync, statSync } from "node:fs";
import { join } from "node:path";

/** Variables that name a socket outside: the agent does not get them. */
const SOCKET_VARIABLES = ["SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS", "TMUX", "TMUX_PANE"];

/**
 * Removes the variables naming a unix socket from `env` (DOCKER_HOST only when it is one) and
 * returns the socket paths they named, to be covered inside too.
 */
export function dropSocketVariables(env: NodeJS.ProcessEnv): string[] {
  const paths: string[] = [];
  const add = (p: string | undefined) => {
    if (p?.startsWith("/")) paths.push(p);
  };
  add(env.SSH_AUTH_SOCK);
  add(/(?:^|[;,])unix:path=([^,;]+)/.exec(env.DBUS_SESSION_BUS_ADDRESS ?? "")?.[1]);
  add(env.TMUX?.split(",")[0]);
  const docker = env.DOCKER_HOST;
  if (docker?.startsWith("unix://")) add(docker.slice("unix://".length));
  for (const name of SOCKET_VARIABLES) delete env[name];
  // A TCP DOCKER_HOST is out of reach anyway: the namespace has no route.
  if (docker?.startsWith("unix://") === true) delete env.DOCKER_HOST;
  return paths;
}

/** The folders that get an empty tmpfs of the agent's own, as they exist here. */
function privateFolders(uid: number): string[] {
  const found = new Set<string>();
  for (const d of ["/tmp", "/var/tmp", "/dev/shm", `/run/user/${uid}`]) {
    try {
      if (statSync(d).isDirectory()) found.add(realpathSync(d));
    } catch {
      // not on this system
    }
  }
  return [...found];
}

const under = (path: string, dir: string) => path === dir || path.startsWith(`${dir}/`);

/** Socket files under `dir`, a few levels deep, skipping `skip` (already covered). */
function socketsUnder(dir: string, skip: readonly string[], depth: number, out: string[]): void {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    const p = join(dir, name);
    if (skip.some((s) => under(p, s))) continue;
    const st = lstatSync(p, { throwIfNoEntry: false });
    if (st?.isSocket() === true) out.push(p);
    else if (st?.isDirectory() === true && depth > 0) socketsUnder(p, skip, depth - 1, out);
  }
}

export interface PrivateSetup {
  readonly uid: number;
  /** Folders the agent must still see at their paths: the working folder, the launch's own, keybroker's. */
  readonly keep: readonly string[];
  /** Socket paths named by the variables `dropSocketVariables` removed. */
  readonly sockets: readonly string[];
  /** An empty, read-only file mounted over each socket left. */
  readonly emptyFile: string;
}

/**
 * Run in the jail as root of its user namespace, before anything else is hidden: `mount` is
 * the jail's checked runner of mount(8).
 */
export function makePrivate(s: PrivateSetup, mount: (args: readonly string[]) => void): void {
  const folders = privateFolders(s.uid).filter((d) => !s.keep.some((k) => under(d, k)));
  // Opened before the tmpfs covers them: /proc/<pid>/fd/N still reaches what is underneath.
  const kept = s.keep
    .filter((k) => folders.some((d) => under(k, d)))
    .map((k) => ({ path: k, fd: openSync(k, "r") }));
  for (const d of folders) {
    const mode = d.startsWith("/run/user/") ? "0700" : "1777";
    mount(["-t", "tmpfs", "-o", `mode=${mode},nosuid,nodev,size=50%`, "keybroker-private", d]);
  }
  for (const k of kept) {
    mkdirSync(k.path, { recursive: true });
    mount(["--no-canonicalize", "--rbind", `/proc/${process.pid}/fd/${k.fd}`, k.path]);
  }
  const left: string[] = [];
  socketsUnder("/run", folders, 3, left);
  if (realpathSync("/var/run") !== "/run") socketsUnder("/var/run", folders, 3, left);
  for (const p of s.sockets) if (!folders.some((d) => under(p, d))) left.push(p);
  for (const p of new Set(left)) {
    if (lstatSync(p, { throwIfNoEntry: false })?.isSocket() === true) mount(["--bind", s.emptyFile, p]);
  }
}
