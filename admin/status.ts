// What `keybroker status` shows: each provider's credentials with id, source, fingerprint,
// state and reset time. Built from a runtime and the pool state; never holds a value.
import type { AuditHealth } from "../audit/audit-log.js";
import type { LaunchInfo } from "../core/launch-info.js";
import { kindOf } from "../rules/kinds/index.js";
import type { CredentialState } from "../secrets/pool.js";
import { fingerprintOf } from "../secrets/secret.js";
import type { StateHealth } from "../state/shared-state.js";
import type { StoredLogin } from "../state/tokens/login.js";
import type { RulesInForce } from "./rules-in-force.js";

export interface CredentialStatus {
  readonly id: string;
  readonly source: string | undefined;
  readonly fingerprint: string | undefined;
  readonly state: CredentialState["state"] | "missing" | "reauth_required";
  readonly until: string | undefined;
  readonly reason: string | undefined;
  readonly requests: number;
  readonly marks: number;
  /** OAuth logins: when the access token expires and when it was last refreshed. */
  readonly expiresAt?: string | undefined;
  readonly refreshedAt?: string | undefined;
}

export interface ProviderStatus {
  readonly id: string;
  readonly active: boolean;
  readonly hosts: readonly string[];
  readonly mount: string | undefined;
  readonly note: string | undefined;
  readonly credentials: readonly CredentialStatus[];
}

export interface StatusReport {
  readonly running: boolean;
  /** The broker's version (this program's when none runs). */
  readonly version: string;
  readonly url: string | undefined;
  readonly pid: number | undefined;
  readonly startedAt?: string | undefined;
  readonly uptimeSeconds?: number | undefined;
  /** Set while the last reload was rejected: the broker runs the previous rules. */
  readonly reload?: { readonly rejectedAt: string; readonly message: string } | undefined;
  /** The home's path when it does not exist (status never creates it). */
  readonly missingHome?: string | undefined;
  /** The CA, or undefined when the home has none yet. */
  readonly ca: { readonly path: string; readonly fingerprint: string } | undefined;
  readonly rules: string;
  readonly providers: readonly ProviderStatus[];
  /** The running broker's audit chains (absent when none runs). */
  readonly audit?: readonly AuditHealth[];
  /** Where marks and logins are shared (absent when no broker runs). */
  readonly state?: StateHealth;
  /** The `run --isolate` launches running now (absent when no broker runs). */
  readonly launches?: readonly LaunchInfo[];
}

/** An OAuth login as a pool credential: its marks, or reauth_required, and its token's times. */
function loginStatus(login: StoredLogin, s: CredentialState | undefined): CredentialStatus {
  const iso = (t: number | undefined) => (t === undefined ? undefined : new Date(t).toISOString());
  return {
    id: login.id,
    source: "oauth",
    fingerprint: fingerprintOf(login.accessToken),
    state: login.state === "reauth_required" ? "reauth_required" : (s?.state ?? "ok"),
    until: iso(s?.until),
    reason: login.state === "reauth_required" ? login.reason : s?.reason,
    requests: s?.requests ?? 0,
    marks: s?.marks ?? 0,
    expiresAt: iso(login.expiresAt),
    refreshedAt: iso(login.refreshedAt),
  };
}

export function providerStatuses(
  rt: RulesInForce,
  pools: Record<string, Record<string, CredentialState>>,
  /** A provider's OAuth logins (from the running broker, or read from the token store). */
  logins: (provider: string) => readonly StoredLogin[] = () => [],
): ProviderStatus[] {
  const out: ProviderStatus[] = [];
  for (const p of rt.providers.values()) {
    if (!p.active && p.rule.fromCatalogue) continue;
    const states = pools[p.rule.id] ?? {};
    out.push({
      id: p.rule.id,
      active: p.active,
      hosts: p.rule.hosts.map((h) => h.source),
      mount: p.rule.mount,
      note: kindOf(p.rule).statusNote(p.rule),
      credentials: kindOf(p.rule).poolOfLogins
        ? logins(p.rule.id).map((l) => loginStatus(l, states[l.id]))
        : p.resolutions.map((r) => {
            const s = states[r.ref];
            return {
              id: r.ref,
              source: r.secret?.source,
              fingerprint: r.secret?.fingerprint,
              state: r.secret === undefined ? "missing" : (s?.state ?? "ok"),
              until: s?.until === undefined ? undefined : new Date(s.until).toISOString(),
              reason: s?.reason,
              requests: s?.requests ?? 0,
              marks: s?.marks ?? 0,
            };
          }),
    });
  }
  return out;
}

/** "3d 4h", "2h 5m", "4m 10s", "12s". */
export function formatUptime(seconds: number): string {
  const units: [number, string][] = [
    [86_400, "d"],
    [3600, "h"],
    [60, "m"],
    [1, "s"],
  ];
  const parts: string[] = [];
  let rest = Math.max(0, Math.floor(seconds));
  for (const [size, unit] of units) {
    const n = Math.floor(rest / size);
    rest -= n * size;
    if (n > 0 || (parts.length === 0 && size === 1)) parts.push(`${n}${unit}`);
    if (parts.length === 2) break;
  }
  return parts.join(" ");
}

/** The lines about the broker itself, each a separate entry so more can be added. */
function headerLines(report: StatusReport): string[] {
  const lines = [
    report.running
      ? `keybroker ${report.version} running at ${report.url} (pid ${report.pid})${
          report.uptimeSeconds === undefined ? "" : `, up ${formatUptime(report.uptimeSeconds)}`
        }`
      : "keybroker is not running (showing the saved state)",
  ];
  if (report.missingHome !== undefined) {
    lines.push(`no keybroker home at ${report.missingHome} (keybroker init or keybroker start creates it)`);
  }
  if (report.reload !== undefined) {
    lines.push(
      `reload rejected at ${report.reload.rejectedAt}, running the previous rules: ${report.reload.message}`,
    );
  }
  lines.push(
    report.ca === undefined
      ? "CA: none yet (keybroker init or keybroker start creates it)"
      : `CA ${report.ca.path} ${report.ca.fingerprint}`,
    `rules: ${report.rules}`,
    ...(report.state === undefined || report.state.store === "home" ? [] : [stateLine(report.state)]),
    ...(report.audit ?? []).map((a) =>
      a.writing
        ? `audit: ${a.file} writing${a.lost > 0 ? ` (${a.lost} event(s) lost, gap line pending)` : ""}`
        : `audit: ${a.file} NOT WRITING since ${a.failingSince}: ${a.error} (${a.lost} event(s) lost so far)`,
    ),
  );
  return lines;
}

/** A fleet broker's `state: redis://… ok`, or `state: degraded since …` (nothing for the home). */
function stateLine(s: StateHealth): string {
  const where = `${s.url}, prefix "${s.prefix}"`;
  return s.degradedSince === undefined
    ? `state: ${where} ok`
    : `state: degraded since ${s.degradedSince} (${where}: ${s.error ?? "unreachable"}); serving from memory`;
}

export function formatStatus(report: StatusReport): string {
  const lines = headerLines(report);
  if (report.providers.length === 0) lines.push("no provider has a credential");
  for (const p of report.providers) {
    const where = [...p.hosts, ...(p.mount ? [p.mount] : [])].join(", ");
    lines.push(`${p.id} ${p.active ? "active" : "INACTIVE"}  ${where}${p.note ? `  (${p.note})` : ""}`);
    for (const c of p.credentials) {
      const from = c.source === undefined ? "no value" : `${c.source} ${c.fingerprint}`;
      const until = c.until === undefined ? "" : ` until ${c.until}`;
      const reason = c.reason === undefined ? "" : ` (${c.reason})`;
      const token =
        c.source === "oauth"
          ? `  expires ${c.expiresAt ?? "unknown"}  refreshed ${c.refreshedAt ?? "never"}`
          : "";
      lines.push(`  ${c.id}  ${from}  ${c.state}${until}${reason}${token}  requests ${c.requests}`);
    }
  }
  // `run --isolate` launches running now, each with its own identity (decision 114).
  for (const l of report.launches ?? []) {
    // "direct": the broker listens inside the launch, no relay (decision 139).
    const via = l.direct === true ? "  direct" : "";
    lines.push(`launch ${l.id}  client ${l.client}  since ${l.startedAt}${via}  ${l.command}`);
  }
  return lines.join("\n");
}
