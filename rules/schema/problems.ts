// zod issues → one problem per thing to fix, with its path.
import type * as z from "zod";
import type { PathProblem } from "../errors.js";

/** Flattens zod issues into one problem per thing to fix, picking the relevant union branch. */
export function schemaProblems(
  issues: readonly z.core.$ZodIssue[],
  prefix: readonly PropertyKey[] = [],
): PathProblem[] {
  const out: PathProblem[] = [];
  for (const issue of issues) {
    const path = [...prefix, ...issue.path];
    switch (issue.code) {
      case "invalid_union": {
        // A branch that got past the type check holds the real problem (e.g. a bad list item).
        const branch = issue.errors.find(
          (issues) =>
            issues.length > 0 &&
            !issues.every(
              (i) => i.path.length === 0 && (i.code === "invalid_type" || i.code === "invalid_value"),
            ),
        );
        if (branch) out.push(...schemaProblems(branch, path));
        else out.push({ path, message: issue.message });
        break;
      }
      case "invalid_key":
        for (const inner of issue.issues) out.push({ path, message: inner.message });
        break;
      case "unrecognized_keys":
        issue.keys.forEach((key, i) => {
          const message = issue.message.split("\n")[i] ?? `unknown key ${JSON.stringify(key)}`;
          out.push({ path, message, key });
        });
        break;
      default:
        out.push({ path, message: issue.message });
    }
  }
  return out;
}
