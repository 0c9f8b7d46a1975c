// Reading and validating a rule file. Every problem (YAML syntax, schema, cross-checks) is
// collected and thrown together as one RuleFileError; a file with none is compiled.
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { isMap, isPair, isScalar, isSeq, LineCounter, type Node, parseDocument } from "yaml";
import { CATALOGUE_ORIGIN } from "./catalogue.js";
import { checkFiles } from "./check-files.js";
import { compileRules } from "./compile.js";
import { crossCheck } from "./cross-check.js";
import { ruleTextDigest } from "./digest.js";
import { formatPath, type PathProblem, type Problem, RuleFileError } from "./errors.js";
import { ruleFileErrorMap, ruleFileSchema, schemaProblems } from "./schema/index.js";
import type { Rules } from "./types.js";

export { type FindRuleFileOptions, findRuleFile, RULE_FILE_NAME } from "./find.js";

/** Reads and compiles the rule file at `path`; undefined → the embedded catalogue alone. */
export function loadRules(path: string | undefined): Rules {
  if (path === undefined) return compileRules({ version: 1 }, CATALOGUE_ORIGIN, process.cwd());
  const absolute = resolve(path);
  let text: string;
  try {
    text = readFileSync(absolute, "utf8");
  } catch (err) {
    const reason =
      (err as NodeJS.ErrnoException).code === "ENOENT" ? "it does not exist" : String((err as Error).message);
    throw new RuleFileError(absolute, [{ path: "", message: `cannot read the rule file: ${reason}` }], {
      cause: err,
    });
  }
  return {
    ...parseRules(text, absolute, dirname(absolute), { checkFiles: true }),
    digest: ruleTextDigest(text),
  };
}

/**
 * Parses, validates and compiles rule-file text. `origin` names it in messages; relative paths
 * in it are taken from `baseDir`. Throws a RuleFileError listing every problem. `checkFiles`
 * also reads the files the broker will need (upstream_ca), as loadRules does for a real file.
 */
export function parseRules(
  text: string,
  origin: string,
  baseDir: string,
  opts: { readonly checkFiles?: boolean } = {},
): Rules {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true, strict: true });
  if (doc.errors.length > 0) {
    const problems = doc.errors.map((err): Problem => {
      const { line, col } = lineCounter.linePos(err.pos[0]);
      const first = err.message.split("\n")[0] ?? err.message;
      return { path: "", message: `YAML syntax error: ${first}`, line, column: col };
    });
    throw new RuleFileError(origin, problems);
  }

  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: 100 });
  } catch (err) {
    throw new RuleFileError(origin, [
      { path: "", message: `cannot read the YAML: ${(err as Error).message}` },
    ]);
  }
  if (raw === null || raw === undefined) {
    // An editor that truncates before writing makes one for a moment: never read as "no rules".
    throw new RuleFileError(origin, [
      {
        path: "",
        message:
          'the rule file is empty: it must say at least "version: 1" (to serve the embedded catalogue alone, remove the file)',
      },
    ]);
  }

  const result = ruleFileSchema.safeParse(raw, { error: ruleFileErrorMap });
  const found: PathProblem[] = [
    ...(result.success ? [] : schemaProblems(result.error.issues)),
    ...crossCheck(raw),
    ...(opts.checkFiles === true ? checkFiles(raw, baseDir) : []),
  ];
  if (found.length > 0 || !result.success) {
    const seen = new Set<string>();
    const problems: Problem[] = [];
    for (const problem of found) {
      const placed = place(problem, doc.contents, lineCounter);
      const key = `${placed.path}\0${placed.message}`;
      if (seen.has(key)) continue;
      seen.add(key);
      problems.push(placed);
    }
    // Reading order: by position, problems without one first (sort is stable).
    problems.sort((a, b) => (a.line ?? 0) - (b.line ?? 0) || (a.column ?? 0) - (b.column ?? 0));
    throw new RuleFileError(origin, problems);
  }
  return compileRules(result.data, origin, baseDir);
}

/** Renders the path and finds the line of the node it points at (or the unknown key itself). */
function place(problem: PathProblem, root: unknown, lineCounter: LineCounter): Problem {
  const path = problem.path.length === 0 ? "(top level)" : formatPath(problem.path);
  const segments = problem.key === undefined ? problem.path : [...problem.path, problem.key];
  let node: unknown = root;
  let offset = rangeStart(root);
  segments.forEach((segment, index) => {
    if (isMap(node)) {
      const pair = node.items.find(
        (item) => isPair(item) && isScalar(item.key) && String(item.key.value) === String(segment),
      );
      const keyStart = rangeStart(pair?.key);
      const isUnknownKey = problem.key !== undefined && index === segments.length - 1;
      node = pair?.value;
      offset = isUnknownKey ? (keyStart ?? offset) : (rangeStart(node) ?? keyStart ?? offset);
    } else if (isSeq(node) && typeof segment === "number") {
      node = node.items[segment];
      offset = rangeStart(node) ?? offset;
    } else node = undefined;
  });
  if (offset === undefined) return { path, message: problem.message };
  const { line, col } = lineCounter.linePos(offset);
  return { path, message: problem.message, line, column: col };
}

function rangeStart(node: unknown): number | undefined {
  return node !== null && typeof node === "object" && "range" in node
    ? ((node as Node).range?.[0] ?? undefined)
    : undefined;
}
