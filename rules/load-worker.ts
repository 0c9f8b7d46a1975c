// Runs loadRules in a worker thread for load-isolated.ts: the YAML parser and the schema
// library load into the worker's heap and go away with it.
import { parentPort, workerData } from "node:worker_threads";
import { RuleFileError } from "./errors.js";
import { loadRules } from "./load.js";
import type { IsolatedResult } from "./load-isolated.js";

const { path } = workerData as { path: string | undefined };
let result: IsolatedResult;
try {
  result = { ok: true, rules: loadRules(path) };
} catch (err) {
  result =
    err instanceof RuleFileError
      ? { ok: false, origin: err.origin, problems: err.problems }
      : { ok: false, message: (err as Error).message ?? String(err) };
}
parentPort!.postMessage(result);
