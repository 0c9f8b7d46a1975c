// One request's state as it moves through the pipeline. The pipeline reads the request and
// answers it through two small interfaces, not node's HTTP/1.1 classes: node's IncomingMessage
// and ServerResponse satisfy them as they are (listener/http1-exchange.ts builds the exchange,
// no wrapper object per request), and so do HTTP/2's compatibility request and response, so an
// HTTP/2 stream can run through the same list. A WebSocket upgrade is HTTP/1.1's own: it goes
// through the request stages, then forwardUpgrade takes the raw socket (websocket.ts).
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http";
import type { Readable } from "node:stream";
import type { BrokerError } from "../core/errors.js";
import type { PolicyRule } from "../rules/types.js";
import type { PoolState } from "../secrets/pool.js";
import type { Secret } from "../secrets/secret.js";
import type { ForwardResult } from "./forward.js";
import type { HeaderList } from "./headers.js";
import type { ClientState, ProviderState, Runtime } from "./runtime.js";

/**
 * - intercept: HTTPS terminated by keybroker after a CONNECT.
 * - reverse: a loopback `/p/<provider>/...` request.
 * - plain: an absolute-form plain-HTTP proxy request (never injected).
 */
export type Mode = "intercept" | "reverse" | "plain";

/** Where the placeholder sits in this request; undefined when it is nowhere to inject. */
export interface Sites {
  headers: number[];
  basic: number | undefined;
  query: boolean;
}

/** The request as the stages read it: its header fields, and its body as a stream. */
export interface ExchangeRequest extends Readable {
  readonly headers: IncomingHttpHeaders;
}

/** How the pipeline answers: a head (status, reason, fields), then a body with backpressure. */
export interface ExchangeResponse {
  readonly headersSent: boolean;
  readonly destroyed: boolean;
  readonly writableFinished: boolean;
  writeHead(status: number, reason: string, headers?: OutgoingHttpHeaders): unknown;
  writeHead(status: number, headers?: OutgoingHttpHeaders): unknown;
  /** Sends the head now (an event stream's), not with the first body bytes. */
  flushHeaders(): void;
  /** False asks the writer to wait for "drain". */
  write(chunk: Buffer): boolean;
  end(chunk?: Buffer | string): unknown;
  destroy(err?: Error): unknown;
  /** "close" (the client went away or the answer ended), "drain", "finish". */
  once(event: "close" | "drain" | "finish", listener: () => void): unknown;
  /** For an event that comes once ("close", "finish"): no wrapper to make and drop, as once has. */
  on(event: "close" | "finish", listener: () => void): unknown;
  off(event: "close", listener: () => void): unknown;
  /** Trailer fields to send after the body (node's; HTTP/1.1 sends them only when chunked). */
  addTrailers?(headers: OutgoingHttpHeaders | IncomingHttpHeaders): void;
  /** HTTP/2 only: resets the stream with this code (RST_STREAM), for an upstream's own reset. */
  reset?(code: number): void;
}

export interface Exchange {
  readonly req: ExchangeRequest;
  readonly res: ExchangeResponse;
  /** The request's method, as the client sent it. */
  readonly method: string;
  readonly mode: Mode;
  readonly rt: Runtime;
  readonly client: ClientState;
  /** Target host (normalized) and port the request is bound for. */
  host: string;
  port: number;
  readonly scheme: "https" | "http";
  /** SNI the client sent, for intercepted requests. */
  readonly sni: string | undefined;
  /** Path and query sent upstream. */
  path: string;
  /** Headers sent upstream (hop-by-hop already removed). */
  readonly headers: HeaderList;
  provider: ProviderState | undefined;
  /** Providers sharing the request's host, until its placeholder picks one (decision 123). */
  sharedHost?: readonly ProviderState[];
  /** The secret injected, when one was. */
  secret: Secret | undefined;
  /** Where the provider's own placeholder was seen (for the outside-injection-point warning). */
  placeholderSeenAt: string[];
  /**
   * A phantom access token the request carries (docs/spec.md §19): swapped for its login's current
   * token in place of the client's placeholder; no other login of the pool is used.
   */
  phantom?: { readonly token: string; readonly login: string };
  /** The client's placeholder for the matched provider. */
  placeholder: string | undefined;
  readonly startedAt: number;
  /** Credential pools' state, shared by every request and kept across reloads. */
  readonly pools: PoolState;
  /** Set when the request gets a credential: the request as sent, and where it goes. */
  injection: { headers: string[]; path: string; sites: Sites | undefined } | undefined;
  /** The request body, read ahead when it may have to be sent again on another credential. */
  body: Buffer | undefined;
  /** The request body as it streams upstream, when a stage puts a transform in its way. */
  bodyStream?: Readable;
  /** Set when the streamed body was refused after the upstream had started to answer. */
  refusedBody?: BrokerError;
  /** Reverse mode: the path after the mount, for re-targeting at a fallback provider. */
  readonly reverseRest: string | undefined;
  /** Credential ids already tried for this request. */
  readonly tried: Set<string>;
  /** Set by applyPolicy when an `approve` rule matched: the request waits for a person. */
  approval?: { readonly rule: PolicyRule; readonly index: number };
  /** Milliseconds spent waiting on the upstream, summed over every attempt (for /metrics). */
  upstreamMs: number;
  /** Milliseconds the request was held for a person's answer: not the broker's overhead. */
  heldMs: number;
  /** The latest forwarded answer (its `held` part for the response stages), once there is one. */
  result: ForwardResult | undefined;
  /** The status the client got, for the record stage. */
  status: number;
  /** Why keybroker refused the request (or cut it off), for the record stage. */
  refusal: BrokerError | undefined;
  /** Set once a refused token was renewed for this request (at most once). */
  reauthorized: boolean;
  /** The pool_exhausted that sends a request on to the fallBack response stage. */
  exhausted: BrokerError | undefined;
}

export function originOf(x: Exchange): string {
  const defaultPort = x.scheme === "https" ? 443 : 80;
  const host = x.host.includes(":") ? `[${x.host}]` : x.host;
  return `${x.scheme}://${host}${x.port === defaultPort ? "" : `:${x.port}`}`;
}

/** How long the upstream may be silent for this exchange: its provider's `timeout`, else `timeouts.upstream`. */
export function upstreamTimeoutMs(x: Exchange): number {
  return x.provider?.rule.timeoutMs ?? x.rt.rules.timeouts.upstreamMs;
}
