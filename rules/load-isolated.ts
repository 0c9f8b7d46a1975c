// loadRules for the long-running broker, in a short-lived child process. Checking a rule file
// needs the YAML parser and the schema library (zod alone is about 10 MiB of resident memory);
// in the broker's own process they would stay for its whole life, used only at start and on
// reload. A worker thread kept them out of the heap, but not out of the process: about 9 MiB of
// the memory the thread touched stayed resident after it exited (allocator arenas, code pages),
// where a child process gives everything back. The compiled rules are plain data (maps, arrays,
// strings) and cross over as a structured clone ("advanced" IPC serialization).
import { fork } from "node:child_process";
import { builtFile } from "../core/package-root.js";
import { type Problem, RuleFileError } from "./errors.js";
import type { Rules } from "./types.js";

export type IsolatedResult =
  | { readonly ok: true; readonly rules: Rules }
  | { readonly ok: false; readonly origin: string; readonly problems: readonly Problem[] }
  | { readonly ok: false; readonly message: string; readonly origin?: undefined };

const CHILD = builtFile("rules/load-child.js");
/** What is kept of the child's stderr for an error message. */
const STDERR_LIMIT = 2000;

/** Like loadRules (same result, same RuleFileError), without loading its libraries here. */
export function loadRulesIsolated(path: string | undefined): Promise<Rules> {
  return new Promise((resolve, reject) => {
    // No inherited node flags: the broker's (--inspect, --cpu-prof, memory settings) are its own.
    const child = fork(CHILD, [path ?? "-"], {
      execArgv: [],
      serialization: "advanced",
      stdio: ["ignore", "ignore", "pipe", "ipc"],
    });
    let settled = false;
    let stderr = "";
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (text: string) => {
      if (stderr.length < STDERR_LIMIT) stderr += text.slice(0, STDERR_LIMIT - stderr.length);
    });
    child.once("message", (message) => {
      settled = true;
      const result = message as IsolatedResult;
      if (result.ok) resolve(result.rules);
      else if (result.origin !== undefined) reject(new RuleFileError(result.origin, result.problems));
      else reject(new Error(`could not load the rules: ${result.message}`));
    });
    child.once("error", (err) => {
      if (settled) return;
      settled = true;
      reject(new Error(`could not start the rule loader: ${err.message}`));
    });
    child.once("exit", (code, signal) => {
      if (settled) return;
      settled = true;
      const detail = stderr.trim().split("\n").slice(-3).join(" / ");
      reject(
        new Error(
          `the rule loader stopped (${signal ?? `exit code ${code}`}) without an answer${detail ? `: ${detail}` : ""}`,
        ),
      );
    });
  });
}
