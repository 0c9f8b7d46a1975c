// Audit logs with n ordinary lines, for the tests of the log, `audit verify` and `audit tail`.
import { type AuditEntry, AuditLog, type AuditLogOptions } from "../../audit/audit-log.js";

/**
 * Writes n injected requests to openai (line i has `?n=i` in its path), each changed by
 * `vary(i)`, and closes the log.
 */
export async function writeAuditEntries(
  home: string,
  n: number,
  opts: AuditLogOptions = {},
  vary: (i: number) => Partial<AuditEntry> = () => ({}),
): Promise<void> {
  const log = new AuditLog(home, opts);
  for (let i = 0; i < n; i++) {
    log.record({
      decision: "injected",
      client: "default",
      provider: "openai",
      credential: "OPENAI_API_KEY",
      fingerprint: "sha256:0123456789ab",
      method: "POST",
      host: "api.openai.com",
      path: `/v1/chat/completions?n=${i}`,
      status: 200,
      bytesIn: 1000 + i,
      bytesOut: 200,
      durationMs: 12.5,
      ...vary(i),
    });
  }
  await log.close();
}

/** An audit line's string fields besides the time and the decision, in the order it writes them. */
export const LINE_STRING_FIELDS = [
  "client",
  "launch",
  "provider",
  "credential",
  "fingerprint",
  "method",
  "host",
  "path",
  "code",
  "reason",
] as const;
