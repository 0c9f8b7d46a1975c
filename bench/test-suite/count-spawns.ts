// A vitest setup file that counts the child processes each test file starts, one line per
// start in $KB_COUNT_LOG: `<test file>\t<kind>`, the kind being broker-start, cli:<command> or
// other:<program>. Used by vitest.config.ts here to measure the suite (docs/performance.md).
import cp from "node:child_process";
import { appendFileSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { expect } from "vitest";

const LOG = process.env.KB_COUNT_LOG;

function kind(command: string, args: readonly unknown[]): string {
  const at = args.findIndex((a) => typeof a === "string" && a.endsWith("dist/cli/main.js"));
  if (at !== -1) return args[at + 1] === "start" ? "broker-start" : `cli:${String(args[at + 1])}`;
  // check-exposure starts the broker from a shell command line.
  if (args.some((a) => typeof a === "string" && a.includes('main.js" start'))) return "broker-start";
  return `other:${command.split("/").pop()}`;
}

function record(command: string, args: unknown): void {
  if (LOG === undefined) return;
  let file = "unknown";
  try {
    file = expect.getState().testPath ?? file;
  } catch {}
  const list = Array.isArray(args) ? (args as unknown[]) : [];
  appendFileSync(LOG, `${file.replace(/.*\/test\//, "test/")}\t${kind(String(command), list)}\n`);
}

type Starter = (command: string, args?: unknown, ...rest: unknown[]) => unknown;
const module = cp as unknown as Record<string, Starter>;
for (const name of ["spawn", "spawnSync", "execFile", "execFileSync"]) {
  const original = module[name]!;
  module[name] = function (this: unknown, command: string, args?: unknown, ...rest: unknown[]) {
    record(command, args);
    return original.call(this, command, args, ...rest);
  };
}
module.fork = ((original: Starter) =>
  function (this: unknown, path: string, args?: unknown, ...rest: unknown[]) {
    record(process.execPath, [path, ...(Array.isArray(args) ? args : [])]);
    return original.call(this, path, args, ...rest);
  })(module.fork!);
// Test files import these by name: make their bindings see the counting versions.
syncBuiltinESMExports();
