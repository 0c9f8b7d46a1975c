// An HTTP/2 stream as the pipeline's exchange (decision 155): the same stages, the same
// forward, the same record as an HTTP/1.1 request. The stream itself is the request body (its
// flow control is the backpressure); `H2Response` answers on it through the pipeline's
// ExchangeResponse, turning a head into HEADERS, the body into DATA and the upstream's
// trailers into trailing HEADERS (a head with nothing after it leaves as one HEADERS frame
// with END_STREAM: gRPC's trailers-only answer).
import type { IncomingHttpHeaders, OutgoingHttpHeaders, ServerHttp2Stream } from "node:http2";
import { constants } from "node:http2";
import type { PoolState } from "../../secrets/pool.js";
import type { Exchange, ExchangeRequest, ExchangeResponse } from "../exchange.js";
import { CONNECTION_SPECIFIC, forwardableRequestHeaders, type HeaderList } from "../headers.js";
import type { Runtime } from "../runtime.js";
import { exchangeFor } from "./exchange-for.js";
import type { Target } from "./request-target.js";

function h2Head(status: number, headers: OutgoingHttpHeaders | undefined): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = { [constants.HTTP2_HEADER_STATUS]: status };
  if (headers === undefined) return out;
  for (const name in headers) {
    const value = headers[name];
    const lower = name.toLowerCase();
    if (value === undefined || CONNECTION_SPECIFIC.has(lower) || lower.charCodeAt(0) === 58) continue;
    out[lower] = value;
  }
  return out;
}

export class H2Response implements ExchangeResponse {
  readonly #stream: ServerHttp2Stream;
  #head: OutgoingHttpHeaders | undefined;
  #trailers: OutgoingHttpHeaders | undefined;
  #responded = false;
  #ended = false;

  constructor(stream: ServerHttp2Stream) {
    this.#stream = stream;
    stream.on("wantTrailers", () => stream.sendTrailers(this.#trailers ?? {}));
  }

  get headersSent(): boolean {
    return this.#head !== undefined || this.#stream.headersSent;
  }
  get destroyed(): boolean {
    return this.#stream.destroyed;
  }
  /** The answer was ended and flushed; a stream the client reset reads as finished too in node, not here. */
  get writableFinished(): boolean {
    return this.#ended && this.#stream.writableFinished;
  }

  writeHead(status: number, reason?: string | OutgoingHttpHeaders, headers?: OutgoingHttpHeaders): this {
    // HTTP/2 has no reason phrase.
    this.#head = h2Head(status, typeof reason === "object" ? reason : headers);
    return this;
  }

  flushHeaders(): void {
    this.#respond(false);
  }

  write(chunk: Buffer): boolean {
    this.#respond(false);
    if (this.#stream.destroyed) return true;
    return this.#stream.write(chunk);
  }

  addTrailers(headers: OutgoingHttpHeaders | IncomingHttpHeaders): void {
    this.#trailers = h2Head(0, headers);
    delete this.#trailers[constants.HTTP2_HEADER_STATUS];
  }

  end(chunk?: Buffer | string): this {
    if (this.#ended) return this;
    this.#ended = true;
    const empty = chunk === undefined || chunk.length === 0;
    if (!this.#responded && empty && this.#trailers === undefined) {
      this.#respond(true);
      return this;
    }
    this.#respond(false);
    if (!this.#stream.destroyed) this.#stream.end(empty ? undefined : chunk);
    return this;
  }

  destroy(): this {
    this.reset(constants.NGHTTP2_INTERNAL_ERROR);
    return this;
  }

  reset(code: number): void {
    if (!this.#stream.destroyed) this.#stream.close(code);
  }

  once(event: "close" | "drain" | "finish", listener: () => void): this {
    this.#stream.once(event, listener);
    return this;
  }

  on(event: "close" | "finish", listener: () => void): this {
    this.#stream.on(event, listener);
    return this;
  }

  off(event: "close", listener: () => void): this {
    this.#stream.off(event, listener);
    return this;
  }

  #respond(endStream: boolean): void {
    if (this.#responded) return;
    this.#responded = true;
    if (this.#stream.destroyed || this.#stream.headersSent) return;
    this.#stream.respond(this.#head ?? h2Head(200, undefined), {
      endStream,
      waitForTrailers: !endStream,
    });
  }
}

/** The request fields as the stages read them: HTTP/1.1's names for what HTTP/2 says otherwise. */
function requestView(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, authority: string): void {
  headers.host = authority;
  // A body without a declared length is what HTTP/1.1 calls chunked: the stages stream it
  // (readBody reads ahead only a declared length). Nothing of this view is forwarded.
  if (!stream.endAfterHeaders && headers["content-length"] === undefined)
    headers["transfer-encoding"] = "chunked";
  (stream as unknown as { headers: IncomingHttpHeaders }).headers = headers;
}

/** The header list sent upstream: no pseudo-headers, `host` from `:authority`, cookies in one field. */
export function h2ForwardHeaders(raw: readonly string[], authority: string, connection?: string): HeaderList {
  const fields: string[] = [];
  let cookie: string | undefined;
  let te = false;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.charCodeAt(0) === 58) continue;
    const value = raw[i + 1]!;
    if (name === "cookie") {
      cookie = cookie === undefined ? value : `${cookie}; ${value}`;
      continue;
    }
    if (name === "te") te = value.trim().toLowerCase() === "trailers";
    // gRPC messages compressed by the upstream could not be checked for an echo of the
    // credential (response-body.ts refuses them): the upstream is asked for plain ones.
    if (name === "grpc-accept-encoding") {
      fields.push(name, "identity");
      continue;
    }
    fields.push(name, value);
  }
  const out = forwardableRequestHeaders(fields, connection);
  out.unshift("host", authority);
  if (cookie !== undefined) out.push("cookie", cookie);
  // gRPC asks for trailers; the answer's trailers are passed on, so the promise holds.
  if (te) out.push("te", "trailers");
  return out;
}

export function h2Exchange(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  raw: readonly string[],
  t: Target,
  rt: Runtime,
  pools: PoolState,
): Exchange {
  const authority = String(headers[constants.HTTP2_HEADER_AUTHORITY] ?? headers.host ?? "");
  const fields = h2ForwardHeaders(raw, authority, headers.connection as string | undefined);
  requestView(stream, headers, authority);
  if (t.mode === "reverse") {
    fields[1] = t.port === 443 ? t.host : `${t.host}:${t.port}`;
  }
  return exchangeFor(
    stream as unknown as ExchangeRequest,
    new H2Response(stream),
    String(headers[constants.HTTP2_HEADER_METHOD] ?? "GET"),
    fields,
    t,
    rt,
    pools,
  );
}
