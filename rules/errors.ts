// Rule-file errors: every problem found in one load, each with the path it concerns and a fix.

/** One problem in a rule file. */
export interface Problem {
  /**
   * Dotted path into the file (`providers.openai.inject`), `(top level)` for the file's root
   * map, or "" when the problem is not about one place in the content (unreadable file, YAML
   * syntax).
   */
  readonly path: string;
  /** What is wrong and how to fix it. Never contains a credential value. */
  readonly message: string;
  /** 1-based line of the offending node, when the file's text is known. */
  readonly line?: number;
  readonly column?: number;
}

/** A problem before it is placed: the path as keys and indices, not yet rendered. */
export interface PathProblem {
  readonly path: readonly PropertyKey[];
  readonly message: string;
  /** For an unknown key: the key itself, so the problem can point at its line. */
  readonly key?: string;
}

/** A rule file that cannot be used. The message lists every problem, one per line. */
export class RuleFileError extends Error {
  override readonly name = "RuleFileError";
  readonly code = "KB_ERR_RULE_FILE";

  constructor(
    /** The file path, or `embedded default catalogue`. */
    readonly origin: string,
    readonly problems: readonly Problem[],
    options?: { cause?: unknown },
  ) {
    super(renderProblems(origin, problems), options);
  }
}

function renderProblems(origin: string, problems: readonly Problem[]): string {
  const count = problems.length === 1 ? "1 problem" : `${problems.length} problems`;
  const lines = problems.map((p) => `  ${formatProblem(p)}`);
  return [`invalid rule file ${origin} (${count}):`, ...lines].join("\n");
}

/**
 * `path: message (line L)`, the form each problem takes in a RuleFileError message; a problem
 * with no path but a position (a YAML syntax error) reads `line L, column C: message`.
 */
export function formatProblem(problem: Problem): string {
  if (problem.path === "") {
    if (problem.line === undefined) return problem.message;
    return `line ${problem.line}, column ${problem.column ?? 1}: ${problem.message}`;
  }
  const where = problem.line === undefined ? "" : ` (line ${problem.line})`;
  return `${problem.path}: ${problem.message}${where}`;
}

/** Turns a path of keys and indices into `providers.openai.hosts[1]` or `resolve["a.b:443"]`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const segment of path) {
    if (typeof segment === "number") out += `[${segment}]`;
    else {
      const key = String(segment);
      if (/^[A-Za-z0-9_-]+$/.test(key)) out += out === "" ? key : `.${key}`;
      else out += `[${JSON.stringify(key)}]`;
    }
  }
  return out;
}

/**
 * Edit distance where swapping two neighbouring letters costs one (optimal string alignment),
 * so `hedaer` is one step from `header`.
 */
export function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const d: number[] = new Array(rows * cols).fill(0);
  const at = (i: number, j: number): number => d[i * cols + j] ?? 0;
  for (let i = 0; i < rows; i++) d[i * cols] = i;
  for (let j = 0; j < cols; j++) d[j] = j;
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, at(i - 2, j - 2) + 1);
      }
      d[i * cols + j] = best;
    }
  }
  return at(a.length, b.length);
}

/** The candidate closest to `word`, if it is close enough to be a likely typo. */
export function suggest(word: string, candidates: readonly string[]): string | undefined {
  const lower = word.toLowerCase();
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of candidates) {
    const distance = editDistance(lower, candidate.toLowerCase());
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  const limit = Math.max(1, Math.min(3, Math.floor(word.length / 3)));
  return best !== undefined && bestDistance <= limit ? best : undefined;
}

/** `unknown key "hedaer" — did you mean "header"?`, or the list of allowed keys. */
export function unknownKeyMessage(key: string, allowed: readonly string[]): string {
  const shown = JSON.stringify(key.length > 40 ? `${key.slice(0, 40)}…` : key);
  const close = suggest(key, allowed);
  if (close !== undefined) return `unknown key ${shown} — did you mean "${close}"?`;
  return `unknown key ${shown} — allowed keys: ${allowed.join(", ")}`;
}
