// The last stage: what came of a request, counted and written down once it is known — /metrics
// (docs/spec.md §18), the access log, the admin page's usage, and one audit line (who, which credential
// by id and fingerprint only, what came of it). Pool events (marks, retries, fallbacks) and
// refusals are recorded here too.

import type { Usage } from "../../admin/usage.js";
import type { AuditDecision } from "../../audit/audit-log.js";
import type { AuditTrail } from "../../audit/audit-trail.js";
import type { BrokerError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import type { BrokerMetrics } from "../../metrics/broker-metrics.js";
import { logAccess } from "../access-log.js";
import type { Exchange } from "../exchange.js";
import type { OnPoolEvent, PoolEvent } from "./mark.js";

export interface RecorderParts {
  readonly log: Logger;
  readonly metrics: BrokerMetrics;
  readonly usage: Usage;
  readonly audit: AuditTrail | undefined;
  /** KEYBROKER_ACCESS_LOG, read once; the rule file's `log.access` is read per rule set. */
  readonly accessLogEnv: boolean;
}

export class Recorder {
  readonly #p: RecorderParts;

  constructor(p: RecorderParts) {
    this.#p = p;
  }

  /**
   * The record stage: `x.status` is what the client got, `x.refusal` why keybroker refused (or
   * cut off) the request, `x.result` the forwarded answer's byte counts.
   */
  record(x: Exchange): void {
    const refusal = x.refusal;
    if (refusal !== undefined) this.#logRefusal(x, refusal);
    const decision: AuditDecision =
      refusal !== undefined ? "blocked" : x.secret === undefined ? "passthrough" : "injected";
    const { metrics, usage, audit, log } = this.#p;
    const status = x.status;
    const code = refusal?.code;
    const result = x.result;
    metrics.request(x, decision, status, code, result);
    if (this.#p.accessLogEnv || x.rt.rules.accessLog) logAccess(log, x, decision, status, code, result);
    usage.count(
      x.client.rule.name,
      x.provider?.rule.id,
      status,
      decision === "blocked",
      (result?.bytesIn ?? 0) + (result?.bytesOut ?? 0),
    );
    if (audit === undefined) return;
    const query = x.provider?.rule.inject.query;
    // Built in one literal (absent fields stay undefined and are left out of the line): one
    // object per request, where spreads made one more for each optional group.
    audit.record({
      decision,
      client: x.client.rule.name,
      launch: x.client.launch?.id,
      provider: x.provider?.rule.id,
      credential: x.secret?.id,
      fingerprint: x.secret?.fingerprint,
      method: x.method,
      host: x.port === (x.scheme === "https" ? 443 : 80) ? x.host : `${x.host}:${x.port}`,
      path: x.path,
      status,
      code: code || undefined,
      bytesIn: result?.bytesIn,
      bytesOut: result?.bytesOut,
      durationMs: Math.round((performance.now() - x.startedAt) * 10) / 10,
      stripParams: query ? [query] : undefined,
    });
  }

  /** A mark, retry or fallback: counted, audited, and (but for a mark, logged already) logged. */
  readonly onPoolEvent: OnPoolEvent = (x, e) => this.#poolEvent(x, e);

  #poolEvent(x: Exchange, e: PoolEvent): void {
    this.#p.metrics.poolEvent(e.decision, e.provider, e.credential, x.provider?.rule.id);
    this.#p.audit?.record({
      decision: e.decision === "fallback" ? "retried" : e.decision,
      client: x.client.rule.name,
      launch: x.client.launch?.id,
      provider: e.provider,
      credential: e.credential,
      method: x.method,
      host: x.host,
      reason: e.detail,
    });
    if (e.decision !== "marked")
      this.#p.log.info({ provider: e.provider, credential: e.credential }, `${e.decision}: ${e.detail}`);
  }

  #logRefusal(x: Exchange, err: BrokerError): void {
    const log = this.#p.log;
    const fields = {
      code: err.code,
      client: x.client.rule.name,
      provider: err.provider,
      host: x.host,
      method: x.method,
    };
    if (err.code === "placeholder_host_mismatch")
      log.warn(fields, `possible exfiltration blocked: ${err.message}`);
    else if (err.status >= 500) log.warn(fields, err.message);
    else log.info(fields, err.message);
  }
}
