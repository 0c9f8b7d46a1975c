// `audit: { require: true }` (docs/spec.md §12): while the audit log cannot be written, no credential is
// injected; the request is refused with 503 audit_unavailable. Costs one boolean read a request.
import { BrokerError } from "../../core/errors.js";
import type { Exchange } from "../exchange.js";

export function createRequireAudit(auditWritable: () => boolean): (x: Exchange) => void {
  return function requireAudit(x) {
    if (x.provider === undefined || !x.rt.rules.audit.require || auditWritable()) return;
    throw new BrokerError(
      "audit_unavailable",
      "the audit log cannot be written, and the rules require it (audit: { require: true }): no credential is injected until it can",
      {
        provider: x.provider.rule.id,
        hint: "free space for $KEYBROKER_HOME/audit; keybroker status shows the audit log's state",
      },
    );
  };
}
