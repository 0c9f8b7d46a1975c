// docs/spec.md §16: a request an `approve` rule matched (applyPolicy set `x.approval`) waits here, before
// a credential is chosen or anything is sent upstream, until a person approves or denies it, the
// rule's timeout passes, or the client hangs up. Its body is read first (up to the retry cap; a
// bigger one is refused with 413 at once) so the person sees a scrubbed preview of it and the
// request goes out whole once approved. Requests no rule holds skip this stage at its first test.
// A place in this broker's room for held requests is taken before the body is read and kept until
// the request is answered (approvals.max_pending, approvals.max_bytes; decision 108): without one
// the request is refused with 503 approvals_full and nothing more of its body is kept. The place
// is kept at most the rule's approval timeout, body read included: a body that has not ended by
// then is answered 408 request_timeout and its place freed (decision 134).
import { stripQuery } from "../../audit/audit-line.js";
import { redactText } from "../../audit/redact.js";
import { BrokerError } from "../../core/errors.js";
import { knownSecrets } from "../../core/scrub.js";
import type { PolicyRule } from "../../rules/types.js";
import type { ApprovalRequest } from "../../state/approvals/store.js";
import type { Place } from "../approval-room.js";
import { type Approvals, ruleIdentity } from "../approvals.js";
import type { Exchange } from "../exchange.js";
import { hasBody } from "../forward.js";
import { DEFAULT_RETRY_BODY_LIMIT } from "./pick-credential.js";

/** The preview shows this much of the body. */
export const PREVIEW_BYTES = 2048;
/** Scrubbed before it is cut to the preview, so a secret across the cut is masked whole. */
const SCRUB_WINDOW = 64 * 1024;

/** Thrown when the client hung up while its request was held: nothing is left to answer. */
export class Withdrawn extends Error {
  override name = "Withdrawn";
}

/** What every view shows of the request: no header, the injected query parameter's value removed. */
export function describeRequest(x: Exchange, rule: PolicyRule): ApprovalRequest {
  const provider = x.provider!.rule;
  const query = provider.inject.query;
  const defaultPort = x.scheme === "https" ? 443 : 80;
  return {
    client: x.client.rule.name,
    provider: provider.id,
    method: x.method.toUpperCase(),
    host: x.port === defaultPort ? x.host : `${x.host}:${x.port}`,
    path: knownSecrets.scrub(query === undefined ? x.path : stripQuery(x.path, [query])),
    rule: ruleIdentity(rule),
  };
}

/**
 * The body's first 2 KiB as text a person can read, with known secrets and secret-shaped
 * strings masked; binary or encoded bodies are described, not shown.
 */
export function bodyPreview(body: Buffer | undefined, contentEncoding: string | undefined): string {
  if (body === undefined || body.length === 0) return "";
  if (contentEncoding !== undefined && contentEncoding !== "identity")
    return `[${body.length} bytes, ${contentEncoding}-encoded]`;
  const head = body.subarray(0, SCRUB_WINDOW);
  if (head.includes(0)) return `[${body.length} bytes of binary data]`;
  const text = redactText(knownSecrets.scrub(head.toString("utf8")));
  return text.length > PREVIEW_BYTES || body.length > SCRUB_WINDOW
    ? `${text.slice(0, PREVIEW_BYTES)}…`
    : text;
}

function tooLarge(x: Exchange, limit: number): BrokerError {
  const id = x.provider!.rule.id;
  return new BrokerError(
    "payload_too_large",
    `the request body is larger than ${limit} bytes; a request that needs approval is held whole, up to providers.${id}.pool.retry_body_limit`,
    { provider: id, hint: `send a smaller body, or raise providers.${id}.pool.retry_body_limit` },
  );
}

/** 503 approvals_full: this broker holds as many requests, or as many bytes of body, as it may. */
function approvalsFull(x: Exchange, bound: "max_pending" | "max_bytes"): BrokerError {
  const { maxPending, maxBytes } = x.rt.rules.approvals;
  const what =
    bound === "max_pending"
      ? `${maxPending} requests are already waiting for approval on this broker`
      : `the bodies of the requests waiting for approval on this broker would pass ${maxBytes} bytes`;
  return new BrokerError("approvals_full", `${what} (approvals.${bound}); this one was not held`, {
    provider: x.provider!.rule.id,
    hint: `answer the pending requests (keybroker approvals), retry later, or raise approvals.${bound} in the rule file`,
  });
}

/** 408 request_timeout: the body did not end within the time its place in the room is kept. */
function bodyTooSlow(x: Exchange, timeoutMs: number): BrokerError {
  const id = x.provider!.rule.id;
  return new BrokerError(
    "request_timeout",
    `the body of a request that needs approval did not arrive whole within ${Math.round(timeoutMs / 1000)} s (the approval timeout); it was not held`,
    {
      provider: id,
      hint: "send the whole body at once; a request that needs approval is shown to a person only once its body has arrived",
      headers: { connection: "close" },
    },
  );
}

/**
 * Reads the whole body, refusing one above `limit` bytes as soon as it gets there, and one that
 * has not ended within `timeoutMs` (request_timeout). A body whose length was not declared is
 * counted in `place` chunk by chunk, and refused (approvals_full) at the chunk that would pass
 * the room's bytes.
 */
function readBounded(
  x: Exchange,
  limit: number,
  place: Place | undefined,
  timeoutMs: number,
): Promise<Buffer> {
  const req = x.req;
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const timer = setTimeout(() => {
      done();
      reject(bodyTooSlow(x, timeoutMs));
    }, timeoutMs);
    const done = () => {
      clearTimeout(timer);
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onClose);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        done();
        reject(tooLarge(x, limit));
        return;
      }
      if (place !== undefined && !place.add(chunk.length)) {
        done();
        reject(approvalsFull(x, "max_bytes"));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      done();
      resolve(Buffer.concat(chunks, size));
    };
    const onError = (err: Error) => {
      done();
      reject(err);
    };
    const onClose = () => {
      done();
      reject(new Withdrawn("the client hung up while sending its body"));
    };
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    req.on("close", onClose);
  });
}

async function holdRequest(x: Exchange, approvals: Approvals): Promise<void> {
  const match = x.approval!;
  const request = describeRequest(x, match.rule);
  if (await approvals.covered(request)) return;
  const place = approvals.room.enter(x.rt.rules.approvals);
  if (place === undefined) throw approvalsFull(x, "max_pending");
  try {
    await holdIn(x, approvals, request, place);
  } finally {
    // Once answered the body is the request's own, as any request's retry copy is.
    place.release();
  }
}

async function holdIn(
  x: Exchange,
  approvals: Approvals,
  request: ApprovalRequest,
  place: Place,
): Promise<void> {
  const match = x.approval!;
  const timeoutMs = match.rule.timeoutMs ?? x.rt.rules.approvals.timeoutMs;
  const enteredAt = performance.now();
  if (hasBody(x)) {
    const limit = x.provider!.rule.pool.retryBodyLimit ?? DEFAULT_RETRY_BODY_LIMIT;
    const length = Number(x.req.headers["content-length"] ?? Number.NaN);
    if (length > limit) throw tooLarge(x, limit);
    // A declared length is counted whole before a byte is read (node's parser keeps the body to it).
    const declared = Number.isFinite(length);
    if (declared && !place.add(length)) throw approvalsFull(x, "max_bytes");
    x.body = await readBounded(x, limit, declared ? undefined : place, timeoutMs);
  }
  const gone = new AbortController();
  const onClose = () => gone.abort();
  x.res.once("close", onClose);
  const preview = bodyPreview(x.body, x.req.headers["content-encoding"]);
  let answer: Awaited<ReturnType<Approvals["hold"]>>;
  const heldFrom = performance.now();
  try {
    // What the body read left of the approval timeout (decision 134), whole ms for the store.
    const left = Math.max(0, Math.round(timeoutMs - (heldFrom - enteredAt)));
    answer = await approvals.hold(request, preview, left, gone.signal);
  } finally {
    x.heldMs = performance.now() - heldFrom;
    x.res.off("close", onClose);
  }
  const { id } = answer.held;
  const what = `${request.method} ${request.path} to ${request.provider}`;
  switch (answer.outcome) {
    case "approved":
      return;
    case "withdrawn":
      throw new Withdrawn(`the client hung up while approval ${id} was pending`);
    case "denied":
      throw new BrokerError(
        "policy_denied",
        `${what} was denied by ${answer.by ?? "a person"} (approval ${id})`,
        {
          provider: request.provider,
          hint: "ask the person who answers approvals for this broker",
        },
      );
    case "approval_timeout":
      throw new BrokerError(
        "approval_timeout",
        `${what} needed approval and none came within ${Math.round(timeoutMs / 1000)} s (approval ${id})`,
        {
          provider: request.provider,
          hint: "retry, and have someone run keybroker approvals / keybroker approve <id> while it waits",
        },
      );
  }
}

export function createHoldForApproval(approvals: Approvals): (x: Exchange) => void | Promise<void> {
  return function holdForApproval(x) {
    if (x.approval === undefined) return;
    return holdRequest(x, approvals);
  };
}
