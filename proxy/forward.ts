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
    const { req, res } = x;
    const result: ForwardResult = { status: 0, bytesIn: 0, bytesOut: 0 };
    let controller: Dispatcher.DispatchController | undefined;
    let done = false;
    let sentAt = 0;
    const finish = () => {
      if (done) return;
      done = true;
      x.upstreamMs += performance.now() - sentAt;
      resolve(result);
    };
    const fail = (failure: unknown) => {
      if (done) return;
      // A stage that cut the request body off says why (undici may report only the abort).
      const err = x.refusedBody ?? failure;
      if (!res.headersSent) {
        done = true;
        x.upstreamMs += performance.now() - sentAt;
        reject(upstreamError(err, x));
      } else {
        // An HTTP/2 client gets the upstream's own RST_STREAM code (a gRPC status depends on it).
        const rst = (failure as { rstCode?: number } | undefined)?.rstCode;
        if (rst !== undefined && res.reset !== undefined) res.reset(rst);
        else res.destroy();
        finish();
      }
    };
    const onClose = () => {
      if (!res.writableFinished && controller !== undefined && !controller.aborted) {
        controller.abort(new Error("client closed the connection"));
      }
      finish();
    };
    res.once("close", onClose);
    const patterns = x.rt.scrubPatterns(x);
    let sink: BodySink | undefined;
    const resume = () => controller?.resume();

    // The request body streams straight into undici, which pauses it for backpressure. Adding
    // a 'data' listener here would switch it to flowing mode and lose chunks.
    const body = x.body ?? x.bodyStream ?? (hasBody(x) ? req : null);
    result.bytesOut = Number(req.headers["content-length"] ?? 0) || 0;
    let held:
      | {
          status: number;
          statusMessage: string;
          headers: IncomingHttpHeaders;
          chunks: Buffer[];
          size: number;
        }
      | undefined;
    const release = () => {
      // The held part grew too large to be an error body: send it and stream the rest.
      const h = held!;
      held = undefined;
      sink = startResponse(res, h.status, h.statusMessage, h.headers, patterns);
      for (const chunk of h.chunks) sink.write(chunk);
    };
    /** Runs a step that may refuse the answer (a body keybroker cannot scrub): abort, then. */
    const orAbort = (c: Dispatcher.DispatchController, step: () => void): boolean => {
      try {
        step();
        return true;
      } catch (err) {
        c.abort(err as Error);
        return false;
      }
    };

    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(c) {
        controller = c;
        if (res.destroyed) c.abort(new Error("client closed the connection"));
      },
      onResponseStart(c, statusCode: number, headers: IncomingHttpHeaders, statusMessage?: string) {
        if (statusCode < 200) return;
        result.status = statusCode;
        for (let i = 0; i < head.length; i++) head[i]!(x, headers);
        if (res.destroyed) {
          c.abort(new Error("client closed the connection"));
          return;
        }
        if (hold?.(statusCode)) {
          held = { status: statusCode, statusMessage: statusMessage ?? "", headers, chunks: [], size: 0 };
          return;
        }
        orAbort(c, () => {
          sink = startResponse(res, statusCode, statusMessage ?? "", headers, patterns);
        });
      },
      onResponseData(c, chunk: Buffer) {
        result.bytesIn += chunk.length;
        noteStreamed(chunk.length);
        if (held !== undefined) {
          held.chunks.push(chunk);
          held.size += chunk.length;
          if (held.size <= HOLD_LIMIT) return;
          orAbort(c, release);
          return;
        }
        if (sink !== undefined && !sink.write(chunk)) {
          c.pause();
          sink.onceDrain(resume);
        }
      },
      onResponseEnd(_c, trailers: IncomingHttpHeaders) {
        if (held !== undefined) {
          result.held = {
            status: held.status,
            statusMessage: held.statusMessage,
            headers: held.headers,
            body: Buffer.concat(held.chunks),
          };
          held = undefined;
          res.off("close", onClose);
          finish();
          return;
        }
        // Trailers (gRPC's status) go out scrubbed, after the body; an HTTP/1.1 answer carries
        // them only when chunked, as node writes them.
        for (const _ in trailers) {
          res.addTrailers?.(patterns?.active ? scrubHeaders(patterns, trailers) : trailers);
          break;
        }
        if (sink === undefined) res.end();
        else sink.end(finish);
      },
      onResponseError(_c, err: Error) {
        fail(err);
      },
    };
    const timeout = upstreamTimeoutMs(x);
    sentAt = performance.now();
    try {
      agent.dispatch(
        {
          origin: originOf(x),
          path: x.path,
          method: x.method,
          headers: x.headers,
          body,
          headersTimeout: timeout,
          bodyTimeout: timeout,
        },
        handler,
      );
    } catch (err) {
      fail(err);
    }
  });
}
