// After the upstream answers: a quota or rejection answer marks only the credential that got
// it; a replayable request is sent again on another credential before any byte reaches the
// client; an exhausted pool in reverse mode moves to the configured fallback provider.
import type { Agent } from "undici";
import { BrokerError } from "../core/errors.js";
import type { Logger } from "../core/log.js";
import { kindOf } from "../rules/kinds/index.js";
import { classify, mayMark } from "../secrets/quota.js";
import type { Exchange } from "./exchange.js";
import { emitHeld, type ForwardResult, forward } from "./forward.js";
import { setHeader } from "./headers.js";
import { scrubText } from "./scrub-stream.js";
import { firstPolicyMatch } from "./stages/apply-policy.js";
import { policyTarget } from "./stages/canonicalize-path.js";
import { createPlanInjection } from "./stages/inject.js";
import { mcpAnswer } from "./stages/mcp.js";
import { hasAlternatives, prepareAttempt, signRequest } from "./stages/pick-credential.js";

export const DEFAULT_COOLDOWN_MS = 60_000;

export interface PoolEvent {
  readonly decision: "marked" | "retried" | "fallback";
  readonly provider: string;
  readonly credential: string;
  readonly detail: string;
}

function holdFor(x: Exchange): ((status: number) => boolean) | undefined {
  return x.injection === undefined ? undefined : mayMark;
}

/** Marks the credential `x` used if the held answer says so. Returns true when it was marked. */
export function bookkeep(
  x: Exchange,
  held: NonNullable<ForwardResult["held"]>,
  log: Logger,
  onEvent: (e: PoolEvent) => void,
): boolean {
  const classified = classify(held.status, held.headers, held.body.toString("utf8"));
  if (classified === undefined || x.secret === undefined) return false;
  // The reason quotes the upstream's error type: kept in the marks, shown in pool_exhausted.
  const verdict = { ...classified, reason: scrubText(x.rt.scrubPatterns(x), classified.reason) };
  const provider = x.provider!.rule;
  if (provider.auth !== undefined) return false;
  const id = x.secret.id;
  if (verdict.kind === "usage_limit") {
    const until = verdict.until ?? Date.now() + (provider.pool.cooldownMs ?? DEFAULT_COOLDOWN_MS);
    const s = x.pools.markUsageLimit(provider.id, id, until, verdict.reason);
    const detail = `${verdict.reason}; usage_limit_reached until ${new Date(s.until ?? until).toISOString()}`;
    log.warn({ provider: provider.id, credential: id, until: s.until }, `credential marked: ${detail}`);
    onEvent({ decision: "marked", provider: provider.id, credential: id, detail });
  } else {
    x.pools.markInvalid(provider.id, id, verdict.reason, x.secret.fingerprint);
    const detail = `${verdict.reason}; invalid until keybroker auth reset ${provider.id}`;
    log.warn({ provider: provider.id, credential: id }, `credential marked: ${detail}`);
    onEvent({ decision: "marked", provider: provider.id, credential: id, detail });
  }
  return true;
}

/**
 * An OAuth login's access token got a 401: refresh that login once (another process may have
 * done it already). True when the request can be sent again with a new token: its body is in
 * memory and the login has a token other than the refused one.
 */
async function refreshRefused(x: Exchange, log: Logger): Promise<boolean> {
  const rule = x.provider?.rule;
  const refresher = x.rt.refresher;
  if (rule === undefined || !kindOf(rule).poolOfLogins || refresher === undefined || x.secret === undefined)
    return false;
  const refused = x.secret.reveal();
  const id = x.secret.id;
  const entry = await refresher.refresh(rule.id, id, refused).catch((err: Error) => {
    log.warn({ provider: rule.id, credential: id }, `refresh after a 401 failed: ${err.message}`);
    return undefined;
  });
  if (entry === undefined || entry.login.state !== "ok" || entry.secret.reveal() === refused) return false;
  if (x.body === undefined) return false;
  x.tried.delete(id);
  return true;
}

/** The JSON body with its "model" renamed for the fallback provider, when the rules map it. */
function mapModel(body: Buffer, models: Readonly<Record<string, string>> | undefined): Buffer {
  if (models === undefined) return body;
  let json: unknown;
  try {
    json = JSON.parse(body.toString("utf8"));
  } catch {
    return body;
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) return body;
  const model = (json as { model?: unknown }).model;
  if (typeof model !== "string" || models[model] === undefined) return body;
  return Buffer.from(JSON.stringify({ ...json, model: models[model] }));
}

/** Re-targets a reverse-mode request at the next fallback provider that can take it. */
/**
 * Why the request may not go to fallback provider `id`, or undefined when it may: the client
 * must be allowed to use it, and no rule of its policy may match (a deny refuses; an approve
 * would hold a request that was already on its way, so that fallback is not taken either). The
 * guest role was checked at the start and does not depend on the provider.
 */
function fallbackRefusal(x: Exchange, id: string, path: string): string | undefined {
  if (!x.rt.clientAllows(x.client, id)) return `client "${x.client.rule.name}" may not use ${id}`;
  const policy = x.rt.providers.get(id)?.rule.policy ?? [];
  // The path is canonical already when the fallback has policy rules (fallBack).
  const match = firstPolicyMatch(x, policy, path);
  if (match === undefined) return undefined;
  return `${id}'s policy rule ${match.index + 1} (${match.rule.action}) matches ${match.method} ${match.path}`;
}

async function fallBack(
  x: Exchange,
  from: string,
  log: Logger,
  onEvent: (e: PoolEvent) => void,
): Promise<boolean> {
  const plan = createPlanInjection(log);
  const body = x.body;
  for (const id of x.rt.rules.fallbacks[from] ?? []) {
    const next = x.rt.providers.get(id);
    if (next?.rule.upstream === undefined || x.reverseRest === undefined || x.injection === undefined)
      continue;
    const upstream = new URL(next.rule.upstream);
    let path: string;
    try {
      path = policyTarget(next.rule, upstream.pathname.replace(/\/$/, "") + x.reverseRest);
    } catch (err) {
      log.info({ from, to: id, why: (err as Error).message }, "pool exhausted: fallback skipped");
      continue;
    }
    const refusal = fallbackRefusal(x, id, path);
    if (refusal !== undefined) {
      log.info({ from, to: id, why: refusal }, "pool exhausted: fallback skipped");
      continue;
    }
    const headers = [...x.injection.headers];
    if (body !== undefined) {
      x.body = mapModel(body, x.rt.rules.fallbackModels[from]?.[id]);
      setHeader(headers, "content-length", String(x.body.length));
    }
    x.provider = next;
    x.host = upstream.hostname;
    x.port = Number(upstream.port) || 443;
    x.path = path;
    setHeader(headers, "host", x.port === 443 ? x.host : `${x.host}:${x.port}`);
    x.headers.length = 0;
    x.headers.push(...headers);
    x.injection = undefined;
    x.tried.clear();
    plan(x);
    try {
      await prepareAttempt(x);
    } catch (err) {
      if (
        err instanceof BrokerError &&
        (err.code === "pool_exhausted" || err.code === "credential_unavailable")
      ) {
        continue;
      }
      throw err;
    }
    onEvent({ decision: "fallback", provider: from, credential: x.secret?.id ?? "", detail: `to ${id}` });
    log.info({ from, to: id }, "pool exhausted: falling back");
    return true;
  }
  return false;
}

/**
 * Forwards the exchange and settles the pool's bookkeeping. Throws a BrokerError only while
 * nothing has been sent to the client.
 */
export async function forwardWithPool(
  x: Exchange,
  agent: Agent,
  log: Logger,
  onEvent: (e: PoolEvent) => void,
): Promise<ForwardResult> {
  let result = await forward(agent, x, { hold: holdFor(x) });
  let reauthorized = false;
  while (result.held !== undefined) {
    const held = result.held;
    const rule = x.provider?.rule;
    const auth = rule === undefined || !kindOf(rule).signed ? undefined : x.rt.upstreamAuth.get(rule.id);
    if (auth !== undefined) {
      // A service account's token was refused: mint a fresh one and try once more.
      if (held.status === 401 && !reauthorized && x.body !== undefined && auth.rejected()) {
        reauthorized = true;
        log.info(
          { provider: x.provider!.rule.id },
          "upstream refused the service-account token: retrying with a new one",
        );
        await signRequest(x);
        result = await forward(agent, x, { hold: holdFor(x) });
        continue;
      }
      emitHeld(x, held);
      return result;
    }
    if (!reauthorized && held.status === 401 && (await refreshRefused(x, log))) {
      // The upstream refused an OAuth access token: refreshed once, the request is sent again.
      reauthorized = true;
      await prepareAttempt(x);
      result = await forward(agent, x, { hold: holdFor(x) });
      continue;
    }
    // An MCP server's challenge never reaches the agent (SPEC §15): its refusal is keybroker's.
    if (rule !== undefined && kindOf(rule).wholeHost) result.held = mcpAnswer(x, held);
    const marked = bookkeep(x, result.held, log, onEvent);
    // SPEC §7: the mark is on disk before the retry starts and before the answer goes out.
    if (marked) await x.pools.durable();
    // Only a body in memory can be sent again, and only where there is another credential.
    if (!marked || x.body === undefined || !hasAlternatives(x)) {
      emitHeld(x, result.held);
      return result;
    }
    const from = x.provider!.rule.id;
    const previous = x.secret!.id;
    try {
      await prepareAttempt(x);
      onEvent({
        decision: "retried",
        provider: from,
        credential: x.secret!.id,
        detail: `after ${previous}: ${held.status}`,
      });
    } catch (err) {
      if (!(err instanceof BrokerError) || err.code !== "pool_exhausted") throw err;
      if (x.mode !== "reverse" || !(await fallBack(x, from, log, onEvent))) throw err;
    }
    result = await forward(agent, x, { hold: holdFor(x) });
  }
  return result;
}

/** A request that finds its pool exhausted before it was sent: fall back, or refuse. */
export async function fallBackBeforeSending(
  x: Exchange,
  err: BrokerError,
  log: Logger,
  onEvent: (e: PoolEvent) => void,
): Promise<boolean> {
  if (err.code !== "pool_exhausted" || x.mode !== "reverse" || x.provider === undefined) return false;
  return fallBack(x, x.provider.rule.id, log, onEvent);
}
