import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { http } from "../../../core/node-http.js";
import { ROOT } from "../../helpers/broker.js";

/** Every .js file under `dir`. */
function jsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".js"))
    .map((e) => join(e.parentPath, e.name));
}

describe("node:http is required, never imported as an ES module (decision 184)", () => {
  it("gives node's own http module", () => {
    expect(typeof http.createServer).toBe("function");
    expect(http.STATUS_CODES[404]).toBe("Not Found");
  });

  it("leaves no ES import of node:http in the built broker, CLI or agent preload", () => {
    // From Node 22 an ES import of node:http reads its WebSocket/MessageEvent/CloseEvent
    // getters, which load Node's bundled undici into the process.
    const esImport =
      /\bimport\s*(?:[\w*{}\s,]+\s*from\s*)?["'](?:node:)?http["']|\bimport\(\s*["'](?:node:)?http["']\s*\)/;
    const offenders = jsFiles(join(ROOT, "dist")).filter((f) => esImport.test(readFileSync(f, "utf8")));
    expect(offenders.map((f) => relative(ROOT, f))).toEqual([]);
  });
});
