// The broker's two audit chains (SPEC §12): `audit.jsonl` gets every decision; the events that
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

export class AuditTrail {
  readonly main: AuditLog;
  readonly security: AuditLog;

  constructor(home: string, opts: Omit<AuditLogOptions, "name"> = {}) {
    this.main = new AuditLog(home, { ...opts, name: "audit" });
    this.security = new AuditLog(home, { ...opts, name: "security" });
  }

  record(entry: AuditEntry): void {
    this.main.record(entry);
    // A client over its `limits.rpm` is traffic control, not a security event: a client retrying
    // in a loop must not rotate the security chain's lines away.
    if (SECURITY.has(entry.decision) && entry.code !== "client_rate_limited") this.security.record(entry);
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
