// The request pipeline, in order. Each stage is a small function of the exchange; a stage that
// refuses the request throws a BrokerError, which becomes the JSON answer of SPEC §11.
//
//   limitClientRate → matchProvider → checkHostBinding → canonicalizePath → checkPlaceholders
//   → checkRole → applyPolicy → requireAudit → planInjection → planMcp → holdForApproval
//   → readBody → checkBodyPlaceholders → pickCredential → applyHeaderRules → signRequest
//   → forward → bookkeepPool (mark, retry on another credential, fall back) → respond
import type { Logger } from "../core/log.js";
import type { Approvals } from "./approvals.js";
import type { Exchange } from "./exchange.js";
import { applyPolicy } from "./stages/apply-policy.js";
import { canonicalizePath } from "./stages/canonicalize-path.js";
import { checkBodyPlaceholders } from "./stages/check-body-placeholders.js";
import { checkHostBinding } from "./stages/check-host-binding.js";
import { checkPlaceholders } from "./stages/check-placeholders.js";
import { checkRole } from "./stages/check-role.js";
import { createHoldForApproval } from "./stages/hold-for-approval.js";
import { applyHeaderRules, createPlanInjection } from "./stages/inject.js";
import { createLimitClientRate } from "./stages/limit-client-rate.js";
import { planMcp } from "./stages/mcp.js";
import { pickCredential, readBody, signRequest } from "./stages/pick-credential.js";
import { createRequireAudit } from "./stages/require-audit.js";

export type Stage = (x: Exchange) => void | Promise<void>;

export function matchProvider(x: Exchange): void {
  if (x.mode === "reverse") return;
  const candidates = x.rt.providersForHost(x.host, x.port);
  // A shared host: checkPlaceholders picks the provider whose placeholder the request carries.
  if (candidates !== undefined && candidates.length > 1) x.sharedHost = candidates;
  else x.provider = candidates?.[0];
}

/**
 * `auditWritable` says whether the audit log is being written (for `audit: { require: true }`);
 * `approvals` holds the requests `approve` rules match until a person answers.
 */
export function requestStages(
  log: Logger,
  auditWritable: () => boolean,
  approvals: Approvals,
): readonly Stage[] {
  return [
    createLimitClientRate(),
    matchProvider,
    checkHostBinding,
    canonicalizePath,
    checkPlaceholders,
    checkRole,
    applyPolicy,
    createRequireAudit(auditWritable),
    createPlanInjection(log),
    planMcp,
    createHoldForApproval(approvals),
    readBody,
    checkBodyPlaceholders,
    pickCredential,
    applyHeaderRules,
    signRequest,
  ];
}

export async function runStages(stages: readonly Stage[], x: Exchange): Promise<void> {
  for (const stage of stages) {
    const pending = stage(x);
    if (pending !== undefined) await pending;
  }
}
