// Per-provider request policy: `deny` refuses, `approve` hands the request to holdForApproval,
// which waits for a person. A rule scoped with `roles:` or `clients:` applies to those only.
import micromatch from "micromatch";
import { BrokerError } from "../../core/errors.js";
import type { PolicyRule } from "../../rules/types.js";
import type { Exchange } from "../exchange.js";

/** Whether the request comes from a `run --isolate` launch of one of `commands` (decision 117). */
function launchedAs(commands: readonly string[], x: Exchange): boolean {
  const command = x.client.launch?.command;
  return command !== undefined && commands.includes(command.split(" ", 1)[0]!);
}

function matches(rule: PolicyRule, x: Exchange, method: string, path: string): boolean {
  if (rule.roles !== undefined && !rule.roles.includes(x.client.rule.role)) return false;
  if (rule.clients !== undefined && !rule.clients.includes(x.client.rule.name)) return false;
  if (rule.launches !== undefined && !launchedAs(rule.launches, x)) return false;
  if (rule.methods.length > 0 && !rule.methods.includes(method)) return false;
  if (rule.paths.length === 0) return true;
  return micromatch.isMatch(path, rule.paths as string[], { dot: true, nocase: rule.ignoreCase === true });
}

/**
 * The first of `rules` that matches the request sent to `target`, and its place; undefined when
 * none. `target` is in its canonical form already (canonicalize-path.ts, decision 101).
 */
export function firstPolicyMatch(
  x: Exchange,
  rules: readonly PolicyRule[],
  target: string,
): { rule: PolicyRule; index: number; method: string; path: string } | undefined {
  const method = (x.req.method ?? "GET").toUpperCase();
  const q = target.indexOf("?");
  const path = q === -1 ? target : target.slice(0, q);
  for (let index = 0; index < rules.length; index++) {
    const rule = rules[index]!;
    if (matches(rule, x, method, path)) return { rule, index, method, path };
  }
  return undefined;
}

export function applyPolicy(x: Exchange): void {
  const rules = x.provider?.rule.policy;
  if (rules === undefined || rules.length === 0) return;
  const match = firstPolicyMatch(x, rules, x.path);
  if (match === undefined) return;
  const { rule, index, method, path } = match;
  if (rule.action === "approve") {
    x.approval = { rule, index };
    return;
  }
  const id = x.provider!.rule.id;
  throw new BrokerError("policy_denied", `${method} ${path} to ${id} is denied by the rule file's policy`, {
    provider: id,
    hint: `change providers.${id}.policy to allow it`,
  });
}
