// Response stages for a refused token (401): a service account's token is minted again, an
// OAuth login's access token refreshed, and the request sent once more. Once per request.
import type { Logger } from "../../core/log.js";
import { kindOf } from "../../rules/kinds/index.js";
import type { Exchange } from "../exchange.js";
import { signRequest } from "./pick-credential.js";
import { ANSWER, NEXT, RESEND, type ResponseStage, runStages, type Stage } from "./stage.js";

/**
 * A service account's token was refused: mint a fresh one and try once more. A service-account
 * provider has no pool: whatever else it answers goes to the client as it is.
 */
export function createReauthorizeServiceAccount(log: Logger): ResponseStage {
  return async function reauthorizeServiceAccount(x) {
    const rule = x.provider?.rule;
    const auth = rule === undefined || !kindOf(rule).signed ? undefined : x.rt.upstreamAuth.get(rule.id);
    if (auth === undefined) return NEXT;
    const held = x.result!.held!;
    if (held.status === 401 && !x.reauthorized && x.body !== undefined && auth.rejected()) {
      x.reauthorized = true;
      log.info(
        { provider: x.provider!.rule.id },
        "upstream refused the service-account token: retrying with a new one",
      );
      await signRequest(x);
      return RESEND;
    }
    return ANSWER;
  };
}

/**
 * An OAuth login's access token got a 401: refresh that login once (another process may have
 * done it already), then run the attempt stages again when the body is in memory. Once the
 * login has a token other than the refused one there is nothing to mark: a request that cannot
 * be sent again passes its 401 on, and the client's next request gets the new token.
 */
export function createRefreshOn401(attempt: readonly Stage[], log: Logger): ResponseStage {
  return async function refreshOn401(x) {
    if (x.reauthorized || x.result!.held!.status !== 401 || !(await refreshRefusedLogin(x, log))) return NEXT;
    if (x.body === undefined) return ANSWER;
    x.tried.delete(x.secret!.id);
    x.reauthorized = true;
    await runStages(attempt, x);
    return RESEND;
  };
}

/**
 * The OAuth login whose access token got a 401, refreshed (once: another request or process may
 * have done it already). True when the login now has a token other than the refused one. A
 * refused WebSocket upgrade calls this too (pipeline.ts): its 401 has reached the client, which
 * connects again with the same phantom or placeholder and gets the new token.
 */
export async function refreshRefusedLogin(x: Exchange, log: Logger): Promise<boolean> {
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
  return entry !== undefined && entry.login.state === "ok" && entry.secret.reveal() !== refused;
}
