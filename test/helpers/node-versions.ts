// Node 20, 22 and 24 for the tests that must see how each Node runtime treats an agent (Node 20
// is the one running the tests, unless the suite runs on another): installed
// once from the npm registry's `node` package (which ships the binary) into
// node_modules/.cache/keybroker-node/<version>, then reused. Not devDependencies: the package's
// `node` bin would shadow the system node in every npm script, and `npm ci` would fetch ~60 MB
// for every install (decision 43).
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { ROOT } from "./broker.js";

/** The versions tested, pinned: what each does with NODE_USE_ENV_PROXY is part of the test. */
export const NODE_VERSIONS = { 20: "20.20.2", 22: "22.23.3", 24: "24.21.0" } as const;

const CACHE = join(ROOT, "node_modules", ".cache", "keybroker-node");
const run = promisify(execFile);

/** The path of a `node` binary of that version, installed on first use. */
export async function nodeBinary(major: keyof typeof NODE_VERSIONS): Promise<string> {
  const version = NODE_VERSIONS[major];
  const dir = join(CACHE, version);
  const bin = join(dir, "node_modules", "node", "bin", "node");
  if (existsSync(bin)) return bin;
  mkdirSync(CACHE, { recursive: true });
  const tmp = `${dir}.${process.pid}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  await run(
    npm,
    [
      "install",
      "--prefix",
      tmp,
      "--no-save",
      "--no-package-lock",
      "--no-audit",
      "--no-fund",
      `node@${version}`,
    ],
    { timeout: 240_000, env: { ...process.env, npm_config_loglevel: "error" } },
  );
  if (!existsSync(bin)) renameSync(tmp, dir);
  else rmSync(tmp, { recursive: true, force: true });
  return bin;
}
