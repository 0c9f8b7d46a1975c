// What the outside of an isolated launch tells its inside (cli/isolate/jail.ts), and what it
// says when the namespaces cannot be made (decision 115).
import { readFileSync } from "node:fs";
import { UsageError, UserError } from "../../core/errors.js";
import type { HiddenPaths } from "./hidden-paths.js";

/** One `--allow-connect host:port`: inside, `host` resolves to `address`, listened on at `port`. */
export interface AllowedConnect {
  readonly host: string;
  readonly port: number;
  readonly address: string;
}

/** Written to the launch's folder as plan.json; holds no secret (the token is in the env). */
export interface JailPlan {
  /** The launch's private folder (0700): the CA bundle copy, plan.json. */
  readonly dir: string;
  /** The port of 127.0.0.1 the proxy variables name, listened on inside. */
  readonly port: number;
  readonly hide: HiddenPaths;
  /** An empty, read-only file mounted over each hidden file. */
  readonly emptyFile: string;
  /** Socket paths the agent's variables named before they were removed (decision 135). */
  readonly sockets: readonly string[];
  readonly allow: readonly AllowedConnect[];
  /** The user's own ids, which the agent runs as inside. */
  readonly uid: number;
  readonly gid: number;
  readonly command: readonly string[];
  readonly cwd: string;
  /** The agent's NODE_OPTIONS (the relay itself runs without keybroker's preload). */
  readonly nodeOptions: string | undefined;
}

/**
 * Between `run` and the jail, over Node's IPC channel (listeners go with "proxy" and "allow").
 * "net": loopback is up, may the broker listen inside itself? "listen": `run`'s answer, `relay`
 * when the jail must make the proxy listener for `run` after all (decision 139).
 */
export type JailMessage =
  | { readonly type: "up" | "ready" | "proxy" | "net" }
  | { readonly type: "listen"; readonly relay: boolean }
  | { readonly type: "allow"; readonly index: number }
  | { readonly type: "signal"; readonly signal: NodeJS.Signals };

/** `--allow-connect` values → destinations, each on its own loopback address inside. */
export function parseAllowConnect(values: readonly string[]): AllowedConnect[] {
  return values.map((value, i) => {
    const m = /^([A-Za-z0-9.-]{1,253}):(\d{1,5})$/.exec(value);
    const port = Number(m?.[2]);
    if (m === null || port < 1 || port > 65535) {
      throw new UsageError(
        `--allow-connect wants host:port (e.g. github.com:22), got ${JSON.stringify(value)}`,
      );
    }
    return { host: m[1]!.toLowerCase(), port, address: `127.0.0.${i + 2}` };
  });
}

/** `--isolate` where namespaces are not there (macOS, Windows): docs/spec.md §20 says so and exits 1. */
export function assertIsolationAvailable(platform: NodeJS.Platform = process.platform): void {
  if (platform !== "linux") {
    throw new UserError(
      `--isolate is not available on ${platform} yet (it needs Linux namespaces); run without it, and see the README's security model for what a same-user agent can read`,
    );
  }
}

function sysctl(path: string, root: string): string | undefined {
  try {
    return readFileSync(`${root}${path}`, "utf8").trim();
  } catch {
    return undefined;
  }
}

/**
 * Why the kernel refused the namespaces, with the setting to change: read from /proc/sys
 * (`root` is for tests). Said when `unshare` failed before the launch's first process ran.
 */
export function namespaceRefusal(uid: number, root = ""): string {
  const why: string[] = [];
  if (sysctl("/proc/sys/user/max_user_namespaces", root) === "0")
    why.push("user.max_user_namespaces is 0 (sysctl -w user.max_user_namespaces=15000)");
  if (sysctl("/proc/sys/kernel/unprivileged_userns_clone", root) === "0" && uid !== 0)
    why.push("kernel.unprivileged_userns_clone is 0 (sysctl -w kernel.unprivileged_userns_clone=1)");
  if (sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", root) === "1" && uid !== 0)
    why.push(
      "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1; allow node with an AppArmor profile, or set it to 0)",
    );
  const cause = why.length > 0 ? why.join("; ") : "the kernel refused them (see unshare's message above)";
  const root_ = uid === 0 ? "" : ", or run keybroker as root";
  return `cannot create the user, mount, PID and network namespaces --isolate needs: ${cause}${root_}`;
}
