// Before any test file: the integration tests run the built CLI (dist/), so a source file newer
// than its build would test old code without a word. Rebuild when any source under the build's
// folders is newer than its compiled file (or has none); when nothing changed (npm test has
// just built) this costs a walk over the sources, no compiler run. It also gives the run one
// temporary folder of its own, removed at the end.
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";

const ROOT = join(import.meta.dirname, "..");

/** The sources `npm run build` compiles: tsconfig.build.json's include, .ts but not .d.ts. */
function* sources(): Generator<string> {
  const config = JSON.parse(readFileSync(join(ROOT, "tsconfig.build.json"), "utf8")) as { include: string[] };
  const walk = function* (dir: string): Generator<string> {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, entry.name);
      if (entry.isDirectory()) yield* walk(p);
      else if (entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts")) yield p;
    }
  };
  for (const dir of config.include) yield* walk(join(ROOT, dir));
}

/** Sources whose dist/ file is missing or older than they are. */
export function staleSources(): string[] {
  const stale: string[] = [];
  for (const src of sources()) {
    const out = join(ROOT, "dist", relative(ROOT, src).replace(/\.ts$/, ".js"));
    if (!existsSync(out) || statSync(out).mtimeMs < statSync(src).mtimeMs) stale.push(relative(ROOT, src));
  }
  return stale;
}

/**
 * Every folder the tests make under the system's temporary folder (homes, rule files, fake
 * upstreams' certificates: several thousand a run) goes under one folder for this run, removed
 * when the run ends. TMPDIR is set before the workers start, so they, the brokers and the CLI
 * they spawn all inherit it (os.tmpdir() reads it).
 */
function oneTemporaryFolder(): () => void {
  const run = mkdtempSync(join(tmpdir(), "kb-test-"));
  // As open as /tmp itself: some tests run the CLI as the user nobody.
  chmodSync(run, 0o1777);
  process.env.TMPDIR = run;
  return () => rmSync(run, { recursive: true, force: true, maxRetries: 5 });
}

/** Set while a run's setup is in place: vitest calls the setup for the root and each project. */
const IN_PLACE = "KEYBROKER_TEST_SETUP";

export default function setup(): () => void {
  // vitest.config.ts has two projects, and vitest runs this once for the root and once for
  // each: the first call does the work for all.
  if (process.env[IN_PLACE] !== undefined) return () => {};
  process.env[IN_PLACE] = "1";
  const removeFolder = oneTemporaryFolder();
  rebuildIfStale();
  return () => {
    removeFolder();
    delete process.env[IN_PLACE];
  };
}

function rebuildIfStale(): void {
  const stale = staleSources();
  if (stale.length === 0) return;
  const shown = stale.slice(0, 3).join(", ") + (stale.length > 3 ? `, … (${stale.length})` : "");
  process.stderr.write(`dist/ is older than ${shown}: rebuilding (npm run build)\n`);
  // npm run build's two steps: tsc, then the bundles over the entry points (scripts/bundle.mjs).
  for (const step of [
    [join(ROOT, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.build.json"],
    [join(ROOT, "scripts/bundle.mjs")],
  ]) {
    const r = spawnSync(process.execPath, step, { cwd: ROOT, stdio: "inherit" });
    if (r.status !== 0) throw new Error("npm run build failed: the integration tests would run an old dist/");
  }
  const left = staleSources();
  if (left.length > 0) throw new Error(`after the build, dist/ is still older than ${left.join(", ")}`);
}
