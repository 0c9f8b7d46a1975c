// Sends the request upstream with undici's dispatch API and streams the response back with
// backpressure both ways: nothing is buffered, SSE chunks go out as they come, and a client
// that goes away aborts the upstream request.
import type { IncomingHttpHeaders } from "node:http";
import type { Dispatcher } from "undici";
import { BrokerError } from "../core/errors.js";
import { noteStreamed } from "../core/v8-tuning.js";
import { type Exchange, originOf, upstreamTimeoutMs } from "./exchange.js";
import { type BodySink, sendWhole, startResponse } from "./response-body.js";
import { scrubHeaders } from "./scrub-stream.js";
import type { HeadStage } from "./stages/stage.js";
import { PrivateAddressError } from "./upstream.js";
import type { H2DispatchOptions } from "./upstream-h2.js";
import type { UpstreamDispatch } from "./upstream-router.js";

const TLS_CODES = new Set([
  "ERR_TLS_CERT_ALTNAME_INVALID",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "CERT_UNTRUSTED",
  "CERT_REJECTED",
  "HOSTNAME_MISMATCH",
]);
const TIMEOUT_CODES = new Set([
  "UND_ERR_HEADERS_TIMEOUT",
  "UND_ERR_BODY_TIMEOUT",
  "UND_ERR_CONNECT_TIMEOUT",
  "ETIMEDOUT",
]);

/** Turns an upstream failure into the broker error the client gets (docs/spec.md §11). */
export function upstreamError(err: unknown, x: Exchange): BrokerError {
  const provider = x.provider?.rule.id;
  const where = `${x.host}:${x.port}`;
  const opts = (hint: string) => ({ cause: err, hint, ...(provider ? { provider } : {}) });
  if (err instanceof BrokerError) return err;
  if (err instanceof PrivateAddressError) {
    return new BrokerError(
      "upstream_unreachable",
      `${where} resolves to ${err.address}, a loopback/private address; refused`,
      opts(`list "${where}" under resolve:, or set allow_private_upstream: true on the provider`),
    );
  }
  const code = String((err as { code?: unknown }).code ?? "");
  if (TLS_CODES.has(code) || code.startsWith("ERR_SSL") || code.startsWith("ERR_TLS")) {
    return new BrokerError(
      "upstream_tls",
      `the TLS certificate of ${where} could not be verified (${code})`,
      opts("if the upstream uses a private CA, add its root to upstream_ca:"),
    );
  }
  if (TIMEOUT_CODES.has(code)) {
    return new BrokerError(
      "upstream_timeout",
      `${where} did not answer in time (${code})`,
      opts("try again later; the provider's timeout (or timeouts.upstream) sets how long keybroker waits"),
    );
  }
  return new BrokerError(
    "upstream_unreachable",
    `could not reach ${where}${code ? ` (${code})` : ""}`,
    opts("check the host name, your network, and resolve: in the rule file"),
  );
}

/** A response kept back from the client while keybroker decides whether to retry it. */
export interface HeldResponse {
  readonly status: number;
  readonly statusMessage: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

export interface ForwardResult {
  status: number;
  bytesIn: number;
  bytesOut: number;
  /** Set when `hold` kept the whole (small) response back. */
  held?: HeldResponse;
}

/** Error bodies are small; a larger one streams through undecided. */
export const HOLD_LIMIT = 64 * 1024;

export function emitHeld(x: Exchange, held: HeldResponse): void {
  sendWhole(x.res, held.status, held.statusMessage, held.headers, held.body, x.rt.scrubPatterns(x));
}

export function hasBody(x: Exchange): boolean {
  const h = x.req.headers;
  if (h["transfer-encoding"] !== undefined) return true;
  const len = h["content-length"];
  return len !== undefined && len !== "0";
}

/** The head and first chunks of an answer `hold` keeps back, while it may still be an error body. */
interface Held {
  status: number;
  statusMessage: string;
  headers: IncomingHttpHeaders;
  chunks: Buffer[];
  size: number;
}

/**
 * Forwards the exchange. Resolves when the response has been fully written (or the exchange
 * ended early); rejects with a BrokerError only when nothing has been sent to the client yet.
 * `hold` keeps back responses whose status it approves, up to HOLD_LIMIT bytes of body, for the
 * response stages; `head` runs on every response's head before it goes on.
 */
export function forward(
  agent: UpstreamDispatch,
  x: Exchange,
  hold: ((status: number) => boolean) | undefined,
  head: readonly HeadStage[],
): Promise<ForwardResult> {
  return new Promise((resolve, reject) => {
    const call = new Forwarding(x, hold, head, resolve, reject);
    call.sentAt = performance.now();
    try {
      agent.dispatch(call.sent, call);
    } catch (err) {
      call.fail(err);
    }
  });
}

/**
 * One request's dispatch handler. Its state is fields and its steps are methods rather than a
 * closure each, made for every request (decision 190); the upstream clients call the `on*`
 * methods on it.
 */
class Forwarding implements Dispatcher.DispatchHandler {
  readonly result: ForwardResult = { status: 0, bytesIn: 0, bytesOut: 0 };
  /**
   * What goes to the upstream client. A streamed request body goes straight into it, which
   * pauses it for backpressure: a 'data' listener here would switch it to flowing mode and lose
   * chunks.
   */
  readonly sent: { -readonly [K in keyof H2DispatchOptions]: H2DispatchOptions[K] };
  readonly #patterns: ReturnType<Exchange["rt"]["scrubPatterns"]>;
  #controller: Dispatcher.DispatchController | undefined;
  #done = false;
  sentAt = 0;
  #sink: BodySink | undefined;
  #held: Held | undefined;
  #resume: (() => void) | undefined;

  constructor(
    readonly x: Exchange,
    readonly hold: ((status: number) => boolean) | undefined,
    readonly head: readonly HeadStage[],
    readonly resolve: (result: ForwardResult) => void,
    readonly reject: (err: unknown) => void,
  ) {
    const { req, res } = x;
    // `on` rather than `once` (a wrapper a request): a response closes once, and #onClose would
    // do nothing the second time anyway.
    res.on("close", this.#onClose);
    this.#patterns = x.rt.scrubPatterns(x);
    const timeout = upstreamTimeoutMs(x);
    this.sent = {
      origin: originOf(x),
      path: x.path,
      method: x.method,
      headers: x.headers,
      body: x.body ?? x.bodyStream ?? (hasBody(x) ? req : null),
      headersTimeout: timeout,
      bodyTimeout: timeout,
    };
    this.result.bytesOut = Number(req.headers["content-length"] ?? 0) || 0;
  }

  readonly finish = (): void => {
    if (this.#done) return;
    this.#done = true;
    this.x.upstreamMs += performance.now() - this.sentAt;
    this.resolve(this.result);
  };

  fail(failure: unknown): void {
    if (this.#done) return;
    const { x } = this;
    const res = x.res;
    // A stage that cut the request body off says why (undici may report only the abort).
    const err = x.refusedBody ?? failure;
    if (!res.headersSent) {
      this.#done = true;
      x.upstreamMs += performance.now() - this.sentAt;
      this.reject(upstreamError(err, x));
    } else {
      // An HTTP/2 client gets the upstream's own RST_STREAM code (a gRPC status depends on it).
      const rst = (failure as { rstCode?: number } | undefined)?.rstCode;
      if (rst !== undefined && res.reset !== undefined) res.reset(rst);
      else res.destroy();
      this.finish();
    }
  }

  readonly #onClose = (): void => {
    const c = this.#controller;
    if (!this.x.res.writableFinished && c !== undefined && !c.aborted) {
      c.abort(new Error("client closed the connection"));
    }
    this.finish();
  };

  /** Starts the answer toward the client; a body keybroker cannot scrub aborts the request. */
  #start(
    c: Dispatcher.DispatchController,
    status: number,
    message: string,
    headers: IncomingHttpHeaders,
  ): boolean {
    try {
      this.#sink = startResponse(this.x.res, status, message, headers, this.#patterns);
      // The answer has begun, so the request cannot be sent again (another credential, a
      // refreshed token): a body read into memory is let go rather than kept for as long as the
      // answer streams (decision 199). The upstream client has it, or has written it, already.
      if (Buffer.isBuffer(this.sent.body)) {
        this.sent.body = null;
        this.x.body = undefined;
      }
      return true;
    } catch (err) {
      c.abort(err as Error);
      return false;
    }
  }

  onRequestStart(c: Dispatcher.DispatchController): void {
    this.#controller = c;
    if (this.x.res.destroyed) c.abort(new Error("client closed the connection"));
  }

  onResponseStart(
    c: Dispatcher.DispatchController,
    statusCode: number,
    headers: IncomingHttpHeaders,
    statusMessage?: string,
  ): void {
    if (statusCode < 200) return;
    const { x, head } = this;
    this.result.status = statusCode;
    for (let i = 0; i < head.length; i++) head[i]!(x, headers);
    if (x.res.destroyed) {
      c.abort(new Error("client closed the connection"));
      return;
    }
    if (this.hold?.(statusCode)) {
      this.#held = { status: statusCode, statusMessage: statusMessage ?? "", headers, chunks: [], size: 0 };
      return;
    }
    this.#start(c, statusCode, statusMessage ?? "", headers);
  }

  onResponseData(c: Dispatcher.DispatchController, chunk: Buffer): void {
    this.result.bytesIn += chunk.length;
    noteStreamed(chunk.length);
    const held = this.#held;
    if (held !== undefined) {
      held.chunks.push(chunk);
      held.size += chunk.length;
      if (held.size <= HOLD_LIMIT) return;
      // The held part grew too large to be an error body: send it and stream the rest.
      this.#held = undefined;
      if (this.#start(c, held.status, held.statusMessage, held.headers)) {
        for (const part of held.chunks) this.#sink!.write(part);
      }
      return;
    }
    const sink = this.#sink;
    if (sink !== undefined && !sink.write(chunk)) {
      c.pause();
      this.#resume ??= () => this.#controller?.resume();
      sink.onceDrain(this.#resume);
    }
  }

  onResponseEnd(_c: Dispatcher.DispatchController, trailers: IncomingHttpHeaders): void {
    const { x } = this;
    const held = this.#held;
    if (held !== undefined) {
      this.result.held = {
        status: held.status,
        statusMessage: held.statusMessage,
        headers: held.headers,
        body: Buffer.concat(held.chunks),
      };
      this.#held = undefined;
      x.res.off("close", this.#onClose);
      this.finish();
      return;
    }
    // Trailers (gRPC's status) go out scrubbed, after the body; an HTTP/1.1 answer carries
    // them only when chunked, as node writes them.
    for (const _ in trailers) {
      const patterns = this.#patterns;
      x.res.addTrailers?.(patterns?.active ? scrubHeaders(patterns, trailers) : trailers);
      break;
    }
    if (this.#sink === undefined) x.res.end();
    else this.#sink.end(this.finish);
  }

  onResponseError(_c: Dispatcher.DispatchController, err: Error): void {
    this.fail(err);
  }
}
