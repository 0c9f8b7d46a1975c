// The folders' layering (docs/architecture.md): no import cycle between top-level folders, and
// state/ (the stores brokers share) imports only core/ and certs/, so any folder may use it. Read
// from the sources' import lines (type-only imports included: they couple folders all the same).
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const FOLDERS = ["admin", "audit", "certs", "cli", "core", "metrics", "proxy", "rules", "secrets", "state"];
const IMPORT =
  /(?:^|[\s;])(?:import|export)\b[^"'`;]*?\bfrom\s*["']([^"']+)["']|\bimport\s*\(\s*["']([^"']+)["']\s*\)/g;

/** folder → folder → the files (and specifiers) that make the edge. */
function folderGraph(): Map<string, Map<string, string[]>> {
  const graph = new Map<string, Map<string, string[]>>(FOLDERS.map((f) => [f, new Map()]));
  const walk = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : [],
    );
  for (const from of FOLDERS) {
    for (const file of walk(join(ROOT, from))) {
      for (const m of readFileSync(file, "utf8").matchAll(IMPORT)) {
        const spec = m[1] ?? m[2]!;
        if (!spec.startsWith(".")) continue;
        const to = relative(ROOT, resolve(dirname(file), spec)).split("/")[0]!;
        if (to === from || !FOLDERS.includes(to)) continue;
        const edges = graph.get(from)!;
        edges.set(to, [...(edges.get(to) ?? []), `${relative(ROOT, file)} imports ${spec}`]);
      }
    }
  }
  return graph;
}

/** The groups of folders that import each other, directly or round a longer loop (Tarjan). */
function cycles(graph: Map<string, Map<string, string[]>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const out: string[][] = [];
  const visit = (v: string) => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    for (const w of graph.get(v)!.keys()) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (stack.includes(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const group: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        group.push(w);
      } while (w !== v);
      if (group.length > 1) out.push(group.sort());
    }
  };
  for (const v of FOLDERS) if (!index.has(v)) visit(v);
  return out;
}

/** Each edge inside a group, with the files that make it: what to look at to break the cycle. */
function explain(graph: Map<string, Map<string, string[]>>, group: readonly string[]): string[] {
  return group.flatMap((a) =>
    group.flatMap((b) => (graph.get(a)!.get(b) ?? []).map((why) => `${a} -> ${b}: ${why}`)),
  );
}

describe("folder layering", () => {
  const graph = folderGraph();

  it("has no import cycle between top-level folders", () => {
    const found = cycles(graph);
    expect(found.flatMap((group) => explain(graph, group))).toEqual([]);
  });

  it("state/ imports only core/ and certs/", () => {
    const upward = [...graph.get("state")!].filter(([to]) => to !== "core" && to !== "certs");
    expect(upward.flatMap(([, why]) => why)).toEqual([]);
  });

  it("reads the imports it checks (proxy/ uses state/, admin/ and secrets/)", () => {
    expect([...graph.get("proxy")!.keys()]).toEqual(expect.arrayContaining(["state", "admin", "secrets"]));
  });
});
