// Where keybroker is installed: the folder of its package.json, found from this file up, both
// from the sources (tests) and from dist/ (an install).
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

let root: string | undefined;

export function packageRoot(): string {
  if (root !== undefined) return root;
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "package.json")) && dirname(dir) !== dir) dir = dirname(dir);
  root = dir;
  return root;
}

/**
 * A file of keybroker's build that runs on its own (a child process, a preload), by its path
 * under dist/: the same file whether the caller runs from the sources (tests) or from a bundle
 * in dist/chunks/ (scripts/bundle.mjs), where a path relative to the caller's own file would
 * point elsewhere.
 */
export function builtFile(relative: string): string {
  return join(packageRoot(), "dist", relative);
}
