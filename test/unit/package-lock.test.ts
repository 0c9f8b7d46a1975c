// `npm ci` installs exactly what package-lock.json lists and refuses a lock that lacks a package
// the manifests ask for: every platform's optional binaries (biome, rollup, esbuild) must be there,
// not only those of the machine that wrote the lock.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT } from "../helpers/broker.js";

interface LockEntry {
  readonly version?: string;
  readonly optional?: boolean;
  readonly dependencies?: Record<string, string>;
  readonly optionalDependencies?: Record<string, string>;
}
interface Lock {
  readonly packages: Record<string, LockEntry>;
}

const lock = JSON.parse(readFileSync(join(ROOT, "package-lock.json"), "utf8")) as Lock;
const manifest = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
  dependencies: Record<string, string>;
  optionalDependencies?: Record<string, string>;
};

/** Where node's resolution would find `name` for the package at `from` (a lock key). */
function resolveIn(from: string, name: string): string | undefined {
  let dir = from;
  for (;;) {
    const key = dir === "" ? `node_modules/${name}` : `${dir}/node_modules/${name}`;
    if (lock.packages[key] !== undefined) return key;
    if (dir === "") return undefined;
    const cut = dir.lastIndexOf("/node_modules/");
    dir = cut === -1 ? "" : dir.slice(0, cut);
  }
}

describe("package-lock.json", () => {
  it("lists every optional package of every package, whatever the platform", () => {
    const missing: string[] = [];
    for (const [key, entry] of Object.entries(lock.packages)) {
      for (const name of Object.keys(entry.optionalDependencies ?? {})) {
        if (resolveIn(key, name) === undefined) missing.push(`${key || "(root)"} → ${name}`);
      }
    }
    expect(missing).toEqual([]);
    // The platform binaries are there for more than this machine.
    expect(lock.packages["node_modules/@biomejs/cli-darwin-arm64"]).toBeDefined();
    expect(lock.packages["node_modules/@rollup/rollup-win32-x64-msvc"]).toBeDefined();
  });

  it("lists the Infisical SDK as optional: keybroker installs and runs without it", () => {
    expect(manifest.dependencies["@infisical/sdk"]).toBeUndefined();
    expect(manifest.optionalDependencies?.["@infisical/sdk"]).toBeDefined();
    expect(lock.packages["node_modules/@infisical/sdk"]?.optional).toBe(true);
  });
});
