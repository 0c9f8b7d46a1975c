// What tells two versions of a rule file apart: `env` and `run` compare the file they find with
// the one the running broker loaded. Its own module: `run` must not load the rule-file parser.
import { createHash } from "node:crypto";

export function ruleTextDigest(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}
