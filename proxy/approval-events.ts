// Each step of an approval (docs/spec.md §16): a log line (the held one says how to answer), a
// notification for a held request, the metrics, and an audit line.
import type { AuditEntry } from "../audit/audit-log.js";
import { approveCommand } from "../core/hints.js";
import type { Logger } from "../core/log.js";
import type { Notifier } from "../core/notify.js";
import type { BrokerMetrics } from "../metrics/broker-metrics.js";
import type { ApprovalEvent } from "./approvals.js";

export interface ApprovalEventParts {
  readonly home: string;
  readonly log: Logger;
  readonly notifier: Notifier;
  readonly metrics: BrokerMetrics;
  readonly audit: (entry: AuditEntry) => void;
}

export function onApprovalEvent(p: ApprovalEventParts, e: ApprovalEvent): void {
  const r = e.request;
  const id = r.id ?? "";
  const what = `${r.method} ${r.host}${r.path} (${r.provider}, client ${r.client})`;
  const until = e.until === undefined ? "" : ` until ${new Date(e.until).toISOString()}`;
  let reason: string;
  switch (e.decision) {
    case "held": {
      reason = `approval ${id}: waiting up to ${Math.round((e.timeoutMs ?? 0) / 1000)} s`;
      const approve = approveCommand(p.home, id);
      p.log.warn(
        {
          approval: id,
          client: r.client,
          provider: r.provider,
          method: r.method,
          host: r.host,
          path: r.path,
        },
        `held ${what} for approval ${id}: to let it through run  ${approve}  (or ${approveCommand(p.home, id, "deny")}); it is refused in ${Math.round((e.timeoutMs ?? 0) / 1000)} s`,
      );
      // Names and ids only (never the body preview or a header): the event may go to a chat.
      void p.notifier.notify({
        event: "approval_pending",
        id,
        client: r.client,
        provider: r.provider,
        method: r.method,
        host: r.host,
        path: r.path,
        expires_in: Math.round((e.timeoutMs ?? 0) / 1000),
        approve,
      });
      break;
    }
    case "approved":
      reason =
        r.id === undefined
          ? `covered by ${e.by}${until}`
          : `approval ${id} approved by ${e.by}${e.until === undefined ? "" : ` for the same client, provider and rule${until}`}`;
      break;
    case "denied":
      reason = `approval ${id} denied by ${e.by}`;
      break;
    case "approval_timeout":
      reason = `approval ${id}: nobody answered in time`;
      break;
    case "withdrawn":
      reason = `approval ${id} withdrawn: the client hung up`;
      break;
  }
  if (e.decision === "held") p.metrics.approvalHeld();
  else if (r.id !== undefined) p.metrics.approvalAnswered(e.decision);
  if (e.decision !== "held")
    p.log.info({ approval: id || undefined, provider: r.provider }, `${what}: ${reason}`);
  p.audit({
    decision: e.decision,
    client: r.client,
    provider: r.provider,
    method: r.method,
    host: r.host,
    path: r.path,
    reason,
  });
}
