// Checks of the files a rule file names that the broker reads when it builds its upstream
// agent (`upstream_ca`): done at load, so `check` reports them and `start` or a reload refuses
// the file with the path and the fix instead of failing later.
import { X509Certificate } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { absolutePath } from "./credential-ref.js";
import type { PathProblem } from "./errors.js";

const PEM_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

export function checkFiles(raw: unknown, baseDir: string): PathProblem[] {
  if (typeof raw !== "object" || raw === null) return [];
  const value = (raw as Record<string, unknown>).upstream_ca;
  const list = typeof value === "string" ? [value] : Array.isArray(value) ? value : [];
  const problems: PathProblem[] = [];
  list.forEach((entry, index) => {
    if (typeof entry !== "string" || entry === "") return; // the schema reports it
    const problem = upstreamCaProblem(absolutePath(entry, baseDir));
    if (problem !== undefined) {
      problems.push({
        path: typeof value === "string" ? ["upstream_ca"] : ["upstream_ca", index],
        message: problem,
      });
    }
  });
  return problems;
}

const FIX =
  "give the path of a PEM file holding the CA certificate(s) that sign your upstream's certificate (a relative path is taken from the rule file's folder)";

/** What is wrong with one `upstream_ca` file, or undefined when it holds usable certificates. */
export function upstreamCaProblem(path: string): string | undefined {
  let text: string;
  try {
    if (statSync(path).isDirectory()) return `${path} is a folder, not a file: ${FIX}`;
    text = readFileSync(path, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why =
      code === "ENOENT"
        ? "it does not exist"
        : code === "EACCES"
          ? "permission denied"
          : (code ?? (err as Error).message);
    return `cannot read ${path}: ${why} — ${FIX}`;
  }
  const blocks = text.match(PEM_BLOCK) ?? [];
  if (blocks.length === 0) return `${path} holds no PEM certificate (-----BEGIN CERTIFICATE-----): ${FIX}`;
  for (const [i, block] of blocks.entries()) {
    try {
      new X509Certificate(block);
    } catch {
      return `${path}: certificate ${i + 1} is not a valid PEM certificate: ${FIX}`;
    }
  }
  return undefined;
}
