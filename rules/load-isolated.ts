// loadRules for the long-running broker, in a short-lived worker thread. Checking a rule file
// needs the YAML parser and the schema library (zod alone is about 10 MiB of resident memory);
// in the broker's own heap they would stay for its whole life, used only at start and on reload.
// The compiled rules are plain data (maps, arrays, strings) and cross over as a structured clone.
import { Worker } from "node:worker_threads";
import { type Problem, RuleFileError } from "./errors.js";
import type { Rules } from "./types.js";

export type IsolatedResult =
  | { readonly ok: true; readonly rules: Rules }
  | { readonly ok: false; readonly origin: string; readonly problems: readonly Problem[] }
  | { readonly ok: false; readonly message: string; readonly origin?: undefined };

/** Like loadRules (same result, same RuleFileError), without loading its libraries here. */
export function loadRulesIsolated(path: string | undefined): Promise<Rules> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL("./load-worker.js", import.meta.url), { workerData: { path } });
    let settled = false;
    worker.once("message", (result: IsolatedResult) => {
      settled = true;
      if (result.ok) resolve(result.rules);
      else if (result.origin !== undefined) reject(new RuleFileError(result.origin, result.problems));
      else reject(new Error(`could not load the rules: ${result.message}`));
    });
    worker.once("error", (err) => {
      settled = true;
      reject(err);
    });
    worker.once("exit", (code) => {
      if (!settled) reject(new Error(`the rule loader stopped (exit code ${code}) without an answer`));
    });
  });
}
