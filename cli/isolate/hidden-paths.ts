// What `run --isolate` hides from the agent (docs/spec.md §20, decision 115): the broker's home, the rule
// file, and every file a secret source reads (secrets/secret-files.ts), those of the rules read
// here and those the running broker named for its own (decision 136). Everything else stays as
// the user sees it.
import { existsSync } from "node:fs";
import { isAbsolute } from "node:path";
import type { Rules } from "../../rules/types.js";
import { secretFiles } from "../../secrets/secret-files.js";

export interface HiddenPaths {
  /** Folders covered by an empty tmpfs. */
  readonly folders: readonly string[];
  /** Files covered by an empty, read-only file. */
  readonly files: readonly string[];
}

/**
 * The paths to hide for these rules, with `home` the broker's home and `others` more files to
 * hide (the rule file read here, and the files the running broker reads secrets from). Only
 * paths that exist are kept: nothing can be mounted over a missing one, and there is nothing to
 * read there either.
 */
export function hiddenPaths(
  rules: Rules,
  home: string,
  cwd: string,
  others: readonly (string | undefined)[],
): HiddenPaths {
  const files = new Set<string>(secretFiles(rules, home, cwd));
  for (const f of others) if (f !== undefined && isAbsolute(f)) files.add(f);
  const folders = [home];
  const inHome = (f: string) => f === home || f.startsWith(`${home}/`);
  return {
    folders: folders.filter((d) => existsSync(d)),
    files: [...files].filter((f) => !inHome(f) && existsSync(f)).sort(),
  };
}
