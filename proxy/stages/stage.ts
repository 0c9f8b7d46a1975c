// What a stage is. A request stage is a small function of the exchange; one that refuses the
// request throws a BrokerError, which becomes the JSON answer of docs/spec.md §11. A response stage looks
// at an answer keybroker held back (an error answer: forward.ts holds those a pool may act on)
// and says what comes next: the next stage, sending the request again, or answering the client.
import type { IncomingHttpHeaders } from "node:http";
import type { Exchange } from "../exchange.js";

export type Stage = (x: Exchange) => void | Promise<void>;

/** Go on with the next response stage. */
export const NEXT = 0;
/** Send the request again (its stages have prepared another attempt). */
export const RESEND = 1;
/** Give the client the held answer as it now is. */
export const ANSWER = 2;
export type Verdict = typeof NEXT | typeof RESEND | typeof ANSWER;

export type ResponseStage = (x: Exchange) => Verdict | Promise<Verdict>;

/**
 * Runs the stages in order: synchronously until one returns a promise, then the rest once it
 * settles. A request whose stages are all synchronous (most) costs no promise and no await
 * here. A stage's refusal is thrown as it is, or rejects the promise once one is under way.
 */
export function runStages(stages: readonly Stage[], x: Exchange, from = 0): void | Promise<void> {
  for (let i = from; i < stages.length; i++) {
    const pending = stages[i]!(x);
    if (pending !== undefined) return pending.then(() => runStages(stages, x, i + 1));
  }
}

/** Runs response stages until one decides; ANSWER when none does. */
export async function runResponseStages(stages: readonly ResponseStage[], x: Exchange): Promise<Verdict> {
  for (const stage of stages) {
    const out = stage(x);
    const verdict = typeof out === "number" ? out : await out;
    if (verdict !== NEXT) return verdict;
  }
  return ANSWER;
}

/** A response-head stage: runs on the upstream's status and headers before anything is sent on. */
export type HeadStage = (x: Exchange, headers: IncomingHttpHeaders) => void;
