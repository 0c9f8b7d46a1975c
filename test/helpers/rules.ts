// Rule-file snippets for the unit tests of one key: parsed after `version: 1`, or the problems
// they raise as `path: message` lines.
import { RuleFileError } from "../../rules/errors.js";
import { parseRules } from "../../rules/load.js";
import type { Rules } from "../../rules/types.js";

export const parseSnippet = (text: string): Rules =>
  parseRules(`version: 1\n${text}`, "test.yaml", "/etc/kb");

export function snippetProblems(text: string): string[] {
  try {
    parseSnippet(text);
  } catch (err) {
    if (err instanceof RuleFileError) return err.problems.map((p) => `${p.path}: ${p.message}`);
    throw err;
  }
  throw new Error("expected the rule file to be rejected");
}
