// Runs loadRules in a short-lived child process for load-isolated.ts: the YAML parser and the
// schema library load into the child's memory and leave with it. The rule file's path comes in
// as the only argument ("-" for none); the result goes back over the IPC channel.
import { RuleFileError } from "./errors.js";
import { loadRules } from "./load.js";
import type { IsolatedResult } from "./load-isolated.js";

const arg = process.argv[2];
const path = arg === undefined || arg === "-" ? undefined : arg;
let result: IsolatedResult;
try {
  result = { ok: true, rules: loadRules(path) };
} catch (err) {
  result =
    err instanceof RuleFileError
      ? { ok: false, origin: err.origin, problems: err.problems }
      : { ok: false, message: (err as Error).message ?? String(err) };
}
if (process.send === undefined) {
  process.stderr.write("load-child.js is run by keybroker start, with an IPC channel\n");
  process.exitCode = 2;
} else {
  process.send(result, () => process.disconnect());
}
