// Per-provider request policy: `deny` refuses, `approve` needs an approver (none is wired yet,
// so such requests are refused rather than let through).
import micromatch from "micromatch";
import { BrokerError } from "../../core/errors.js";
import type { PolicyRule } from "../../rules/types.js";
import type { Exchange } from "../exchange.js";

function matches(rule: PolicyRule, method: string, path: string): boolean {
  if (rule.methods.length > 0 && !rule.methods.includes(method)) return false;
  return rule.paths.length === 0 || micromatch.isMatch(path, rule.paths as string[], { dot: true });
}

/**
 * The path as a server will read it: percent-escapes decoded, `.` and `..` segments resolved,
 * repeated slashes collapsed. Policy matches this form, so `/x/../repos`, `/%72epos` and
 * `//repos` cannot slip past a rule written for `/repos/**`.
 */
export function normalizePath(raw: string): string {
  let decoded: string;
  try {
    decoded = decodeURIComponent(raw);
  } catch {
    decoded = raw;
  }
  const out: string[] = [];
  for (const segment of decoded.split("/")) {
    if (segment === "" || segment === ".") continue;
    if (segment === "..") out.pop();
    else out.push(segment);
  }
  return "/" + out.join("/") + (decoded.endsWith("/") && out.length > 0 ? "/" : "");
}

export function applyPolicy(x: Exchange): void {
  const rules = x.provider?.rule.policy;
  if (rules === undefined || rules.length === 0) return;
  const method = (x.req.method ?? "GET").toUpperCase();
  const q = x.path.indexOf("?");
  const path = normalizePath(q === -1 ? x.path : x.path.slice(0, q));
  const id = x.provider!.rule.id;
  for (const rule of rules) {
    if (!matches(rule, method, path)) continue;
    if (rule.action === "deny") {
      throw new BrokerError(
        "policy_denied",
        `${method} ${path} to ${id} is denied by the rule file's policy`,
        {
          provider: id,
          hint: `change providers.${id}.policy to allow it`,
        },
      );
    }
    throw new BrokerError(
      "approval_timeout",
      `${method} ${path} to ${id} needs approval, and no approver is connected`,
      {
        provider: id,
        hint: `remove the approve rule from providers.${id}.policy to allow it without approval`,
      },
    );
  }
}
