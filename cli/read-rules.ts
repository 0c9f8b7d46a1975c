// The rule file for commands that exit at once: checked in-process.
import { UserError } from "../core/errors.js";
import { RuleFileError } from "../rules/errors.js";
import { findRuleFile } from "../rules/find.js";
import { loadRules } from "../rules/load.js";
import type { Rules } from "../rules/types.js";
import type { Context } from "./context.js";

/** The rule file's path (or undefined for the embedded catalogue) and the loaded rules. */
export function readRules(
  ctx: Context,
  config: string | undefined,
): { path: string | undefined; rules: Rules } {
  try {
    const path = findRuleFile({ config, env: ctx.env, cwd: ctx.cwd, home: ctx.home });
    return { path, rules: loadRules(path) };
  } catch (err) {
    if (err instanceof RuleFileError) throw new UserError(err.message, { cause: err });
    throw err;
  }
}
