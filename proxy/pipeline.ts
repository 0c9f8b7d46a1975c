// Every step a request takes, in order, in one place. Each step is a small function of the
// exchange in proxy/stages/; a stage that refuses the request throws a BrokerError, which
// becomes the JSON answer of docs/spec.md §11 (and is recorded).
//
//   before the list, in proxy/listener/: the client is authenticated (once per CONNECT, or per
//   plain-HTTP and reverse-mode request: listener/client-auth.ts) and the target worked out:
//   the CONNECT's origin, a reverse mount, or a plain-HTTP URL (listener/request-target.ts).
//   These two are not stages because an exchange is made for a known client and target: a
//   CONNECT is authenticated before any request exists, and a request refused there is
//   answered without becoming an exchange, so it is not counted or audited as one.
//
//   request   limitClientRate → matchProvider → checkHostBinding → answerTokenEndpoint
//             → canonicalizePath → checkPlaceholders → findPhantoms → checkRole → applyPolicy → requireAudit → planInjection
//             → planMcp → holdForApproval → readBody → checkBodyPlaceholders
//   attempt   pickCredential → applyHeaderRules → signRequest
//             (an exhausted pool in reverse mode: fallBack before sending)
//   forward   forward, or forwardUpgrade for a WebSocket; the answer's head passes the head
//             stages (stripMcpChallenge), its body the scrubber (response-body.ts) as it streams,
//             unless it is an error answer a pool may act on: that one is held back whole
//   response  on a held answer, until one stage decides (stages/stage.ts):
//             reauthorizeServiceAccount → refreshOn401 → answerMcp → mark → retryNextCredential
//             → fallBack; RESEND forwards again (the retry re-ran the attempt stages), ANSWER
//             sends the held answer, scrubbed
//   record    metrics, access log, usage, audit (stages/record.ts)
//
// A rule set runs only the request stages it uses (stagesFor, decision 170): a rule file with no
// client limits, guests, policy, MCP server, `audit: { require: true }` or `intercept: all`
// leaves their stages out of its list, so a feature not configured costs nothing per request.
import type { Agent } from "undici";
import { BrokerError, internalError } from "../core/errors.js";
import type { Logger } from "../core/log.js";
import { kindOf } from "../rules/kinds/index.js";
import type { Rules } from "../rules/types.js";
import { mayMark } from "../secrets/quota.js";
import type { Approvals } from "./approvals.js";
import type { Exchange } from "./exchange.js";
import { emitHeld, forward } from "./forward.js";
import { sendError } from "./listener/client-errors.js";
import { AnsweredHere, createAnswerTokenEndpoint } from "./stages/answer-token-endpoint.js";
import { applyPolicy } from "./stages/apply-policy.js";
import { canonicalizePath } from "./stages/canonicalize-path.js";
import { checkBodyPlaceholders } from "./stages/check-body-placeholders.js";
import { checkHostBinding } from "./stages/check-host-binding.js";
import { checkPlaceholders } from "./stages/check-placeholders.js";
import { checkRole } from "./stages/check-role.js";
import { FallBack } from "./stages/fall-back.js";
import { findPhantoms } from "./stages/find-phantoms.js";
import { createHoldForApproval, Withdrawn } from "./stages/hold-for-approval.js";
import { applyHeaderRules, createPlanInjection } from "./stages/inject.js";
import { createLimitClientRate } from "./stages/limit-client-rate.js";
import { bookkeep, createMark } from "./stages/mark.js";
import { matchProvider } from "./stages/match-provider.js";
import { answerMcp, planMcp, stripMcpChallenge } from "./stages/mcp.js";
import { pickCredential, readBody, signRequest } from "./stages/pick-credential.js";
import {
  createReauthorizeServiceAccount,
  createRefreshOn401,
  refreshRefusedLogin,
} from "./stages/reauthorize.js";
import type { Recorder } from "./stages/record.js";
import { createRequireAudit } from "./stages/require-audit.js";
import { createRetryNextCredential } from "./stages/retry.js";
import {
  ANSWER,
  type HeadStage,
  type ResponseStage,
  runResponseStages,
  runStages,
  type Stage,
} from "./stages/stage.js";
import type { UpstreamDispatch } from "./upstream-router.js";
import { forwardUpgrade, type Upgrade } from "./websocket.js";

export { matchProvider, runStages, type Stage };

export interface PipelineParts {
  readonly log: Logger;
  /** Whether the audit log is being written (for `audit: { require: true }`). */
  readonly auditWritable: () => boolean;
  /** Holds the requests `approve` rules match until a person answers. */
  readonly approvals: Approvals;
  /** The upstream agent of the current rules (WebSocket upgrades). */
  readonly agent: () => Agent;
  /** Where requests go upstream: HTTP/1.1 or HTTP/2, by what the origin speaks (upstream-router.ts). */
  readonly upstream: () => UpstreamDispatch;
  readonly recorder: Recorder;
}

/** The stages that make one attempt ready to leave; a retry on another credential runs them again. */
export const attemptStages: readonly Stage[] = [pickCredential, applyHeaderRules, signRequest];

export function requestStages(p: PipelineParts): readonly Stage[] {
  return [
    createLimitClientRate(),
    matchProvider,
    checkHostBinding,
    createAnswerTokenEndpoint(p.agent, p.log),
    canonicalizePath,
    checkPlaceholders,
    findPhantoms,
    checkRole,
    applyPolicy,
    createRequireAudit(p.auditWritable),
    createPlanInjection(p.log),
    planMcp,
    createHoldForApproval(p.approvals),
    readBody,
    checkBodyPlaceholders,
    ...attemptStages,
  ];
}

const anyPolicy = (r: Rules) => r.providers.some((p) => p.policy.length > 0);

/** The rule sets a request stage has work in, by its name; a stage not named here always runs. */
const USED_BY: Readonly<Record<string, (r: Rules) => boolean>> = {
  limitClientRate: (r) => r.clients.some((c) => c.rpm !== undefined),
  canonicalizePath: anyPolicy,
  checkRole: (r) => r.clients.some((c) => c.role === "guest"),
  applyPolicy: anyPolicy,
  requireAudit: (r) => r.audit.require,
  planMcp: (r) => r.providers.some((p) => kindOf(p).wholeHost),
  holdForApproval: (r) => r.providers.some((p) => p.policy.some((rule) => rule.action === "approve")),
  checkBodyPlaceholders: (r) => r.intercept === "all",
};

/**
 * The request stages `rules` has work for, in order: each left out is one that returns at its
 * first test for every request under these rules (decision 170).
 */
export function stagesFor(all: readonly Stage[], rules: Rules): readonly Stage[] {
  return all.filter((stage) => USED_BY[stage.name]?.(rules) ?? true);
}

export const headStages: readonly HeadStage[] = [stripMcpChallenge];

export function responseStages(p: PipelineParts, fallBack: FallBack): readonly ResponseStage[] {
  const onEvent = p.recorder.onPoolEvent;
  return [
    createReauthorizeServiceAccount(p.log),
    createRefreshOn401(attemptStages, p.log),
    answerMcp,
    createMark(p.log, onEvent),
    createRetryNextCredential(attemptStages, onEvent),
    fallBack.stage,
  ];
}

/** Runs exchanges through the lists above. */
export class Pipeline {
  readonly #p: PipelineParts;
  readonly #request: readonly Stage[];
  readonly #response: readonly ResponseStage[];
  readonly #fallBack: FallBack;
  /** The request stages of the rules last seen: composed once per rule set, not per request. */
  #rules: Rules | undefined;
  #stages: readonly Stage[] = [];

  constructor(p: PipelineParts) {
    this.#p = p;
    this.#request = requestStages(p);
    this.#fallBack = new FallBack(attemptStages, p.log, p.recorder.onPoolEvent);
    this.#response = responseStages(p, this.#fallBack);
  }

  async run(x: Exchange, upgrade?: Upgrade): Promise<void> {
    try {
      try {
        const pending = runStages(this.#stagesOf(x.rt.rules), x);
        if (pending !== undefined) await pending;
      } catch (err) {
        if (!(err instanceof BrokerError)) throw err;
        const fell = this.#fallBack.beforeSending(x, err);
        if (fell === false || !(await fell)) throw err;
      }
      if (upgrade === undefined) await this.#forward(x);
      else await this.#forwardUpgrade(x, upgrade);
    } catch (err) {
      // The client hung up on a held request: its withdrawal is audited, nobody is left to answer.
      if (err instanceof Withdrawn) return;
      // An OAuth endpoint's request keybroker answered itself (docs/spec.md §19).
      if (err instanceof AnsweredHere) {
        this.#p.recorder.record(x);
        return;
      }
      if (err instanceof BrokerError) {
        x.refusal = err;
        x.status = err.status;
        x.result = undefined;
        this.#p.recorder.record(x);
        sendError(x.res, err);
      } else {
        this.#p.log.error({ err }, "internal error while handling a request");
        sendError(x.res, internalError());
      }
      x.req.resume();
    }
  }

  #stagesOf(rules: Rules): readonly Stage[] {
    if (rules !== this.#rules) {
      this.#stages = stagesFor(this.#request, rules);
      this.#rules = rules;
    }
    return this.#stages;
  }

  async #forward(x: Exchange): Promise<void> {
    const agent = this.#p.upstream();
    let result = await forward(agent, x, x.injection === undefined ? undefined : mayMark, headStages);
    x.result = result;
    while (result.held !== undefined) {
      if ((await runResponseStages(this.#response, x)) === ANSWER) {
        emitHeld(x, result.held);
        break;
      }
      result = await forward(agent, x, x.injection === undefined ? undefined : mayMark, headStages);
      x.result = result;
    }
    x.status = result.status;
    // A body refused after the upstream had begun to answer: the exchange was cut off.
    x.refusal = x.refusedBody;
    this.#p.recorder.record(x);
  }

  /**
   * A WebSocket upgrade: forwarded as one. A refused upgrade marks the credential as a refused
   * request would; an OAuth login's token refused with 401 is first refreshed, as after any
   * upstream 401 (docs/spec.md §8, reauthorize.ts), and marked only when no new token came of it.
   */
  async #forwardUpgrade(x: Exchange, upgrade: Upgrade): Promise<void> {
    const answer = await forwardUpgrade(this.#p.agent(), x, upgrade);
    x.status = answer === 101 ? 101 : answer.status;
    this.#p.recorder.record(x);
    if (answer === 101 || x.injection === undefined || !mayMark(x.status)) return;
    if (x.status === 401 && (await refreshRefusedLogin(x, this.#p.log))) return;
    bookkeep(x, answer, this.#p.log, this.#p.recorder.onPoolEvent);
  }
}
