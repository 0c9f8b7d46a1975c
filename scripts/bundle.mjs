// The second half of `npm run build`: after tsc has compiled every file into dist/, esbuild
// writes keybroker's entry points over their compiled copies as bundles of keybroker's own code
// and its pure-JavaScript parsers (zod, yaml, oauth4webapi), with the code they share in
// dist/chunks/. A command then loads a handful of files instead of about three hundred, which
// halves what every `keybroker` command costs to start (decision 172). The other packages stay
// in node_modules: undici's internals are loaded by path (proxy/upstream.ts), pino starts
// workers from its own files, and the rest are loaded only when a feature needs them.
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { build } from "esbuild";

const ROOT = join(import.meta.dirname, "..");
const BUNDLED = new Set(["zod", "yaml", "oauth4webapi"]);

const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
const external = [...Object.keys(pkg.dependencies), ...Object.keys(pkg.optionalDependencies ?? {})]
  .filter((name) => !BUNDLED.has(name))
  .flatMap((name) => [name, `${name}/*`]);

// Each file that runs as a process or a preload of its own (see core/package-root.ts builtFile).
const ENTRIES = ["cli/main", "cli/node-preload", "cli/isolate/jail", "rules/load-child"];

rmSync(join(ROOT, "dist/chunks"), { recursive: true, force: true });
await build({
  absWorkingDir: ROOT,
  entryPoints: ENTRIES.map((name) => ({ in: `${name}.ts`, out: name })),
  outdir: "dist",
  chunkNames: "chunks/[name]-[hash]",
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  external,
  // yaml is CommonJS: its require() of Node's own modules needs a require in an ES module.
  banner: {
    js: 'import { createRequire as __kbRequire } from "node:module"; const require = __kbRequire(import.meta.url);',
  },
  logLevel: "warning",
});
