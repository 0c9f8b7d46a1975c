// Response stage: a quota or rejection answer marks only the credential that got it (docs/spec.md §7).
// The mark is on disk before the request is retried and before the answer goes out.
import type { Logger } from "../../core/log.js";
import { kindOf } from "../../rules/kinds/index.js";
import { classify } from "../../secrets/quota.js";
import type { Exchange } from "../exchange.js";
import type { HeldResponse } from "../forward.js";
import { scrubText } from "../scrub-stream.js";
import { hasAlternatives } from "./pick-credential.js";
import { ANSWER, NEXT, type ResponseStage } from "./stage.js";

export const DEFAULT_COOLDOWN_MS = 60_000;

export interface PoolEvent {
  readonly decision: "marked" | "retried" | "fallback";
  readonly provider: string;
  readonly credential: string;
  readonly detail: string;
}

/** Told of each mark, retry and fallback (metrics, the audit log): see proxy/stages/record.ts. */
export type OnPoolEvent = (x: Exchange, e: PoolEvent) => void;

/** Marks the credential `x` used if the held answer says so. Returns true when it was marked. */
export function bookkeep(x: Exchange, held: HeldResponse, log: Logger, onEvent: OnPoolEvent): boolean {
  const classified = classify(held.status, held.headers, held.body.toString("utf8"));
  if (classified === undefined || x.secret === undefined) return false;
  // The reason quotes the upstream's error type: kept in the marks, shown in pool_exhausted.
  const verdict = { ...classified, reason: scrubText(x.rt.scrubPatterns(x), classified.reason) };
  const provider = x.provider!.rule;
  if (kindOf(provider).signed) return false;
  const id = x.secret.id;
  if (verdict.kind === "usage_limit") {
    const until = verdict.until ?? Date.now() + (provider.pool.cooldownMs ?? DEFAULT_COOLDOWN_MS);
    const s = x.pools.markUsageLimit(provider.id, id, until, verdict.reason);
    const detail = `${verdict.reason}; usage_limit_reached until ${new Date(s.until ?? until).toISOString()}`;
    log.warn({ provider: provider.id, credential: id, until: s.until }, `credential marked: ${detail}`);
    onEvent(x, { decision: "marked", provider: provider.id, credential: id, detail });
  } else {
    x.pools.markInvalid(provider.id, id, verdict.reason, x.secret.fingerprint);
    const detail = `${verdict.reason}; invalid until keybroker auth reset ${provider.id}`;
    log.warn({ provider: provider.id, credential: id }, `credential marked: ${detail}`);
    onEvent(x, { decision: "marked", provider: provider.id, credential: id, detail });
  }
  return true;
}

/**
 * Marks the credential when the answer says so. The request goes on to the next credential
 * only when it was marked, its body is in memory (only that can be sent again) and there is
 * another credential (or a fallback) to go to; otherwise the client gets the answer.
 */
export function createMark(log: Logger, onEvent: OnPoolEvent): ResponseStage {
  return async function mark(x) {
    const marked = bookkeep(x, x.result!.held!, log, onEvent);
    // docs/spec.md §7: the mark is on disk before the retry starts and before the answer goes out.
    if (marked) await x.pools.durable();
    if (!marked || x.body === undefined || !hasAlternatives(x)) return ANSWER;
    return NEXT;
  };
}
