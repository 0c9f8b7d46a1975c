// Reverse mode: a pool with no usable credential left moves the request to the provider's
// configured fallbacks, in order (docs/spec.md §7), before the request is sent (fallBackBeforeSending)
// or after its last credential was marked (the fallBack response stage).
import { BrokerError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import type { Exchange } from "../exchange.js";
import { replaceHeaders, setHeader } from "../headers.js";
import { firstPolicyMatch } from "./apply-policy.js";
import { policyTarget } from "./canonicalize-path.js";
import { createPlanInjection } from "./inject.js";
import type { OnPoolEvent } from "./mark.js";
import { RESEND, type ResponseStage, runStages, type Stage, type Verdict } from "./stage.js";

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

/** Re-targets a reverse-mode request at the next fallback provider that can take it. */
export class FallBack {
  readonly #attempt: readonly Stage[];
  readonly #log: Logger;
  readonly #onEvent: OnPoolEvent;
  readonly #plan: (x: Exchange) => void;
  /** The response stage: after retryNextCredential found the pool exhausted. */
  readonly stage: ResponseStage;

  constructor(attempt: readonly Stage[], log: Logger, onEvent: OnPoolEvent) {
    this.#attempt = attempt;
    this.#log = log;
    this.#onEvent = onEvent;
    this.#plan = createPlanInjection(log);
    const fallBack = async (x: Exchange): Promise<Verdict> => {
      const exhausted = x.exhausted!;
      x.exhausted = undefined;
      if (await this.#fallBack(x, x.provider!.rule.id)) return RESEND;
      throw exhausted;
    };
    this.stage = fallBack;
  }

  /** A request that finds its pool exhausted before it was sent: fall back, or refuse. */
  beforeSending(x: Exchange, err: BrokerError): Promise<boolean> | false {
    if (err.code !== "pool_exhausted" || x.mode !== "reverse" || x.provider === undefined) return false;
    return this.#fallBack(x, x.provider.rule.id);
  }

  async #fallBack(x: Exchange, from: string): Promise<boolean> {
    const log = this.#log;
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
      replaceHeaders(x.headers, headers);
      x.injection = undefined;
      x.tried.clear();
      this.#plan(x);
      try {
        await runStages(this.#attempt, x);
      } catch (err) {
        if (
          err instanceof BrokerError &&
          (err.code === "pool_exhausted" || err.code === "credential_unavailable")
        ) {
          continue;
        }
        throw err;
      }
      this.#onEvent(x, {
        decision: "fallback",
        provider: from,
        credential: x.secret?.id ?? "",
        detail: `to ${id}`,
      });
      log.info({ from, to: id }, "pool exhausted: falling back");
      return true;
    }
    return false;
  }
}
