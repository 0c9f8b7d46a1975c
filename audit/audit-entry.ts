// What one audit line holds (docs/spec.md §12): the decisions, which of them also go to the security
// chain, an entry as the broker records it, a line as read back, a `gap` and the log's health.
// The log that writes them is audit-log.ts.

/**
 * Decisions that matter after the fact: also written to the security chain (docs/spec.md §12), which
 * ordinary traffic cannot rotate away.
 */
export const SECURITY_DECISIONS = [
  "blocked",
  "login",
  "removed",
  "reset",
  "reload",
  "held",
  "approved",
  "denied",
  "approval_timeout",
  "withdrawn",
  "admin_login",
  "admin_login_failed",
  "admin_logout",
  "launch_started",
  "launch_ended",
] as const;

export const AUDIT_DECISIONS = [
  "injected",
  "passthrough",
  "retried",
  "marked",
  "refreshed",
  "reauth_required",
  "gap",
  ...SECURITY_DECISIONS,
] as const;

export type AuditDecision = (typeof AUDIT_DECISIONS)[number];

/** What the request path hands to `record()`. Only `decision` is required. */
export interface AuditEntry {
  readonly decision: AuditDecision;
  /** Defaults to the moment `record()` is called. */
  readonly time?: Date | number | string;
  readonly client?: string;
  /** The `run --isolate` launch the request came from (decision 114). */
  readonly launch?: string | undefined;
  readonly provider?: string;
  /** The credential's id (e.g. `OPENAI_API_KEY`), never its value. */
  readonly credential?: string;
  /** The credential's fingerprint (`sha256:…`, see secrets/secret.ts). */
  readonly fingerprint?: string;
  readonly method?: string;
  readonly host?: string;
  /** Path and query as sent; values of `stripParams` are removed before writing. */
  readonly path?: string;
  readonly status?: number;
  /** Response body bytes received from upstream. */
  readonly bytesIn?: number;
  /** Request body bytes sent upstream. */
  readonly bytesOut?: number;
  readonly durationMs?: number;
  /** An error code (docs/spec.md §11) or quota reason (`insufficient_quota`, …). */
  readonly code?: string;
  /** Free text: why the decision was taken. */
  readonly reason?: string;
  /** Query parameters whose values are removed from `path` (the injected ones, e.g. `key`). */
  readonly stripParams?: readonly string[];
  /** For `gap`: how many events were lost, and the times of the first and last of them. */
  readonly lost?: number;
  readonly first?: string;
  readonly last?: string;
}

/** A line as written: snake_case fields, absent ones omitted. */
export interface AuditRecord {
  readonly time: string;
  readonly decision: AuditDecision;
  readonly client?: string;
  readonly launch?: string;
  readonly provider?: string;
  readonly credential?: string;
  readonly fingerprint?: string;
  readonly method?: string;
  readonly host?: string;
  readonly path?: string;
  readonly status?: number;
  readonly bytes_in?: number;
  readonly bytes_out?: number;
  readonly duration_ms?: number;
  readonly code?: string;
  readonly reason?: string;
  readonly lost?: number;
  readonly first?: string;
  readonly last?: string;
  readonly prev: string;
  readonly hash: string;
}

/** Events that could not be written and are not yet recorded by a `gap` line. */
export interface AuditGap {
  readonly lost: number;
  readonly first: string;
  readonly last: string;
  /** Why: the write errors seen, or the torn line found. */
  readonly why: string;
}

/** Whether the log is being written (for `status` and `audit: { require: true }`). */
export interface AuditHealth {
  readonly file: string;
  readonly writing: boolean;
  /** While writes fail: since when (ISO time) and the last error. */
  readonly failingSince?: string;
  readonly error?: string;
  /** Events lost that no `gap` line records yet. */
  readonly lost: number;
}
