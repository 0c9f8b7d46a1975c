// Which rule file to use. Kept apart from load.ts so that finding a file does not load the YAML
// parser and the schema library.
import { statSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { RuleFileError } from "./errors.js";

export const RULE_FILE_NAME = "keybroker.yaml";

export interface FindRuleFileOptions {
  /** `--config`, relative to `cwd`. */
  readonly config?: string;
  readonly env: NodeJS.ProcessEnv;
  readonly cwd: string;
  /** The keybroker home folder (`$KEYBROKER_HOME`, default `~/.keybroker`). */
  readonly home: string;
}

function isFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

function expandHome(path: string): string {
  if (path === "~") return homedir();
  return path.startsWith("~/") ? join(homedir(), path.slice(2)) : path;
}

/**
 * The rule file to use: `--config`, else `$KEYBROKER_CONFIG`, else `./keybroker.yaml`, else
 * `<home>/keybroker.yaml`; undefined when there is none (the embedded catalogue serves). A file
 * named explicitly (flag or variable) that does not exist is an error, never skipped.
 */
export function findRuleFile(options: FindRuleFileOptions): string | undefined {
  const explicit: [string, string | undefined][] = [
    ["--config", options.config],
    ["KEYBROKER_CONFIG", options.env.KEYBROKER_CONFIG],
  ];
  for (const [origin, value] of explicit) {
    if (value === undefined || value === "") continue;
    const path = resolve(options.cwd, expandHome(value));
    if (isFile(path)) return path;
    let exists = false;
    try {
      statSync(path);
      exists = true;
    } catch {}
    const message = exists
      ? `${path} is not a file — name the rule file itself`
      : `${path} does not exist — check the path, or run "keybroker init" to create a starter file`;
    throw new RuleFileError(path, [{ path: "", message: `the rule file named by ${origin}: ${message}` }]);
  }
  for (const candidate of [join(options.cwd, RULE_FILE_NAME), join(options.home, RULE_FILE_NAME)]) {
    if (isFile(candidate)) return candidate;
  }
  return undefined;
}
