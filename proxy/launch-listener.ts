// A listener made inside an isolated launch's network namespace for the broker itself (decision
// 139), so the agent's connections reach the broker with no relay in between. Node cannot call
// setns(2), so a short-lived helper does it: util-linux `nsenter` enters the jail's namespaces
// (its user namespace too when the broker is not root: the user owns it, so entering it gives the
// rights over its network namespace), runs `node -e HELPER`, which listens at the proxy address
// inside and sends the listening socket back over Node's IPC channel (an fd passed over a unix
// socket, as `cluster` does); the helper then exits and the broker accepts on that socket.
// Only a process that is a child of the launch's own `run` and in a network namespace of its own
// is entered; every refusal says why, and `run` then relays as before.

import { spawn } from "node:child_process";
import { readFileSync, readlinkSync } from "node:fs";
import { Server } from "node:net";
import type { LaunchOwner } from "../core/launch-info.js";
import { RefusedListener } from "../core/launch-info.js";
import { processStart } from "./process-start.js";

/**
 * The most the helper may take to hand its listener over before it is killed: well under the
 * 10 s `run` waits for the broker's answer, so no listener comes after `run` has given up and
 * let the jail make its own.
 */
const HELPER_MS = 5_000;

/** Listens at argv[1]:argv[2] and sends the listener to the broker; says why not otherwise. */
const HELPER = `
const server = require("node:net").createServer();
const done = () => process.disconnect();
server.once("error", (err) => process.send({ error: err.code || err.message }, done));
server.listen(Number(process.argv[2]), process.argv[1], () => process.send({ ok: true }, server, () => {
  server.close();
  done();
}));
`;

/** A process's parent pid, from /proc/<pid>/stat; undefined when it is gone. */
function parentOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  } catch {
    return undefined;
  }
}

/** The namespace a process is in (`net:[4026532…]`), or undefined when it cannot be read. */
function namespaceOf(pid: number | "self", kind: "net" | "user"): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/${kind}`);
  } catch {
    return undefined;
  }
}

/**
 * Why `pid` may not be entered for a launch tied to `owner`, or undefined when it may: it must be
 * a child of that `run` (still the same process) in a network namespace (and, unless the broker
 * is root, a user namespace) other than the broker's.
 */
export function whyNotJail(owner: LaunchOwner | undefined, pid: number, root: boolean): string | undefined {
  if (owner === undefined)
    return "this broker cannot see the launch's run (another PID namespace), so it cannot tell its jail";
  if (processStart(owner.pid) !== owner.start) return "the launch's run is gone";
  if (parentOf(pid) !== owner.pid) return `process ${pid} is not a child of the launch's run`;
  const net = namespaceOf(pid, "net");
  if (net === undefined || net === namespaceOf("self", "net"))
    return `process ${pid} is not in a network namespace of its own`;
  if (!root && namespaceOf(pid, "user") === namespaceOf("self", "user"))
    return `process ${pid} is not in a user namespace of its own`;
  return undefined;
}

/**
 * Makes a listener on `host:port` inside the network namespace of `pid` (checked with whyNotJail
 * first) and resolves with it, the broker's own; rejects with RefusedListener saying why not.
 */
export async function listenInJail(
  owner: LaunchOwner | undefined,
  pid: number,
  host: string,
  port: number,
): Promise<Server> {
  const root = process.geteuid?.() === 0;
  const why = whyNotJail(owner, pid, root);
  if (why !== undefined) throw new RefusedListener(why);
  const start = processStart(pid);
  const enter = root ? ["--net"] : ["--user", "--preserve-credentials", "--net"];
  const server = await new Promise<Server>((resolve, reject) => {
    const helper = spawn(
      "nsenter",
      ["--target", String(pid), ...enter, "--", process.execPath, "-e", HELPER, host, String(port)],
      // No secret of the broker's environment goes to the helper: it needs none.
      { stdio: ["ignore", "ignore", "pipe", "ipc"], env: { PATH: process.env.PATH ?? "/usr/bin:/bin" } },
    );
    let settled = false;
    const refuse = (why: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(new RefusedListener(why));
    };
    let stderr = "";
    helper.stderr!.setEncoding("utf8").on("data", (d: string) => {
      stderr = (stderr + d).slice(-500);
    });
    const timer = setTimeout(() => {
      helper.kill("SIGKILL");
      refuse(`nsenter gave no listener within ${HELPER_MS / 1000} s`);
    }, HELPER_MS);
    helper.on("message", (m: { ok?: boolean; error?: string }, handle: unknown) => {
      if (m.ok === true && handle instanceof Server) {
        // Too late (given up already): the listener must not stay open unserved.
        if (settled) handle.close();
        else {
          settled = true;
          clearTimeout(timer);
          resolve(handle);
        }
      } else refuse(`cannot listen on ${host}:${port} inside: ${m.error ?? "no listener came"}`);
    });
    helper.once("error", (err) => {
      const code = (err as NodeJS.ErrnoException).code;
      refuse(`cannot run nsenter (${code}): install util-linux`);
    });
    // Gone without a listener: judged once the channel has closed too, so a message still
    // on its way (the helper exits right after sending) is read first.
    let exit: string | undefined;
    let closed = false;
    const ended = () => {
      if (exit === undefined || !closed) return;
      const said = stderr.trim().split("\n").at(-1) ?? "";
      refuse(`nsenter exited (${exit})${said === "" ? "" : `: ${said}`}`);
    };
    helper.once("exit", (code, signal) => {
      exit = String(signal ?? code);
      ended();
    });
    helper.once("disconnect", () => {
      closed = true;
      ended();
    });
  });
  // The pid could have been reused between the check and nsenter: the listener is then refused.
  if (processStart(pid) !== start || parentOf(pid) !== owner!.pid) {
    server.close();
    throw new RefusedListener(`process ${pid} changed while its listener was made`);
  }
  return server;
}
