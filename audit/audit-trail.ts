// The broker's two audit chains (docs/spec.md §12): `audit.jsonl` gets every decision; the events that
// matter after the fact also go to `security.jsonl`, chained and rotated on its own, so that
// ordinary traffic cannot rotate them away.
import {
  type AuditDecision,
  type AuditEntry,
  type AuditHealth,
  AuditLog,
  type AuditLogOptions,
  SECURITY_DECISIONS,
} from "./audit-log.js";

const SECURITY: ReadonlySet<AuditDecision> = new Set<AuditDecision>(SECURITY_DECISIONS);

/**
 * Refusals that are traffic control or an upstream's trouble, not a security event: a client
 * retrying in a loop, an exhausted pool or an upstream outage answers every request with one of
 * these, and must not rotate the security chain's lines away. They stay in `audit.jsonl`.
 * `upstream_tls` is not among them: a certificate that fails toward an upstream may be an attack.
 */
export const OPERATIONAL_CODES: ReadonlySet<string> = new Set([
  "client_rate_limited",
  "pool_exhausted",
  "credential_unavailable",
  "audit_unavailable",
  "approvals_full",
  "upstream_unreachable",
  "upstream_timeout",
]);

/** True when the entry also goes to `security.jsonl`. */
export function isSecurityEvent(entry: AuditEntry): boolean {
  return SECURITY.has(entry.decision) && !(entry.code !== undefined && OPERATIONAL_CODES.has(entry.code));
}

export class AuditTrail {
  readonly main: AuditLog;
  readonly security: AuditLog;

  constructor(home: string, opts: Omit<AuditLogOptions, "name"> = {}) {
    this.main = new AuditLog(home, { ...opts, name: "audit" });
    this.security = new AuditLog(home, { ...opts, name: "security" });
  }

  record(entry: AuditEntry): void {
    this.main.record(entry);
    if (isSecurityEvent(entry)) this.security.record(entry);
  }

  /** False while either chain cannot be written. */
  get writable(): boolean {
    return this.main.writable && this.security.writable;
  }

  health(): AuditHealth[] {
    return [this.main.health(), this.security.health()];
  }

  async flush(): Promise<void> {
    await Promise.all([this.main.flush(), this.security.flush()]);
  }

  async close(): Promise<void> {
    await Promise.all([this.main.close(), this.security.close()]);
  }
}
