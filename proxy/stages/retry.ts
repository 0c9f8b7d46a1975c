// Response stage: a marked credential's request is sent again on another credential of the same
// pool, before any byte of the answer reaches the client. The attempt stages (pick a credential,
// the header rules, signing) run again; an exhausted pool in reverse mode goes on to fallBack.
import { BrokerError } from "../../core/errors.js";
import type { OnPoolEvent } from "./mark.js";
import { NEXT, RESEND, type ResponseStage, runStages, type Stage } from "./stage.js";

export function createRetryNextCredential(attempt: readonly Stage[], onEvent: OnPoolEvent): ResponseStage {
  return async function retryNextCredential(x) {
    const from = x.provider!.rule.id;
    const previous = x.secret!.id;
    try {
      await runStages(attempt, x);
    } catch (err) {
      if (!(err instanceof BrokerError) || err.code !== "pool_exhausted" || x.mode !== "reverse") throw err;
      x.exhausted = err;
      return NEXT;
    }
    onEvent(x, {
      decision: "retried",
      provider: from,
      credential: x.secret!.id,
      detail: `after ${previous}: ${x.result!.held!.status}`,
    });
    return RESEND;
  };
}
