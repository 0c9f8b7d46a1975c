// HTTP/2 upstream: one node:http2 session per origin that speaks it, multiplexing every request
// bound there (from HTTP/2 streams and HTTP/1.1 requests alike), behind the same handler
// interface undici's dispatch uses, so forward.ts has one path for both (decision 154).
//   - the request: the pipeline's header list becomes an HTTP/2 header block (`host` becomes
//     `:authority`, connection-specific fields are dropped, `te` only as `trailers`); its body
//     is piped with the stream's own flow control, so a slow upstream slows the client down;
//   - the answer: head, data with pause/resume (node sends WINDOW_UPDATE only as the data is
//     read), trailers handed over at the end, after the last byte, so none is lost to a paused
//     reader;
//   - an abort (the client went away) resets the upstream stream with CANCEL; a stream the
//     upstream resets fails with its code (`rstCode`), which forward.ts passes on to an HTTP/2
//     client as the same code.
import {
  type ClientHttp2Session,
  type ClientHttp2Stream,
  constants,
  connect as h2connect,
  type IncomingHttpHeaders,
  type IncomingHttpStatusHeader,
  type OutgoingHttpHeaders,
} from "node:http2";
import type { Socket } from "node:net";
import type { Readable } from "node:stream";
import type { Dispatcher } from "undici";
import { CONNECTION_SPECIFIC, type HeaderList } from "./headers.js";

/** How long an HTTP/2 upstream session may sit without streams before it is closed. */
const IDLE_MS = 30_000;
/** How long a new session's first streams wait for the peer's SETTINGS. */
const SETTINGS_WAIT_MS = 2_000;

export interface H2DispatchOptions {
  readonly origin: string;
  readonly path: string;
  readonly method: string;
  readonly headers: HeaderList;
  readonly body: Buffer | Readable | null;
  readonly headersTimeout: number;
  readonly bodyTimeout: number;
}

/** An upstream stream's failure, with the RST_STREAM code the upstream sent, if it sent one. */
export class UpstreamStreamError extends Error {
  constructor(
    message: string,
    readonly code: string,
    readonly rstCode?: number,
  ) {
    super(message);
  }
}

/** The header block of an HTTP/2 request from the pipeline's flat list. */
export function h2RequestHeaders(o: H2DispatchOptions): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {
    [constants.HTTP2_HEADER_METHOD]: o.method,
    [constants.HTTP2_HEADER_PATH]: o.path,
    [constants.HTTP2_HEADER_SCHEME]: "https",
  };
  let authority: string | undefined;
  const list = o.headers;
  for (let i = 0; i < list.length; i += 2) {
    const name = list[i]!;
    const value = list[i + 1]!;
    if (name === "host") {
      authority ??= value;
      continue;
    }
    if (CONNECTION_SPECIFIC.has(name)) continue;
    if (name === "te" && value.trim().toLowerCase() !== "trailers") continue;
    const prior = out[name];
    if (prior === undefined) out[name] = value;
    else if (Array.isArray(prior)) prior.push(value);
    else out[name] = [String(prior), value];
  }
  out[constants.HTTP2_HEADER_AUTHORITY] = authority ?? new URL(o.origin).host;
  return out;
}

/** The response head without pseudo-headers, as undici hands heads to a handler. */
function responseHeaders(h: IncomingHttpHeaders): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {};
  for (const name in h) if (name.charCodeAt(0) !== 58 /* ":" */) out[name] = h[name];
  return out;
}

/** A closed stream's only listener: an error after 'close' concerns no request any more. */
const ignoreError = () => {};

export class H2Sessions {
  /** The sessions of each origin: one, and another each time all are at their peer's limit. */
  readonly #sessions = new Map<string, ClientHttp2Session[]>();
  /** Streams open on each session, counted here: node does not say how many. */
  readonly #open = new WeakMap<ClientHttp2Session, number>();
  /**
   * Sessions whose peer's SETTINGS have come: before that, `remoteSettings` holds node's
   * defaults (no limit), not the peer's.
   */
  readonly #settled = new WeakSet<ClientHttp2Session>();
  /** What the requests that wait for a session's settings wait on: one promise a session. */
  readonly #settling = new WeakMap<ClientHttp2Session, Promise<void>>();

  /**
   * A session of `origin` that takes a new stream: open, with the peer's settings known, and
   * below the number of concurrent streams the peer allows (SETTINGS_MAX_CONCURRENT_STREAMS;
   * real providers say 100 or so). nghttp2 holds a stream past that number until one ends, which
   * for an event stream may be minutes, so when every session is full this says none, and the
   * router opens another connection (decision 178). A session whose settings have not come yet
   * is `waiting`: the caller waits for them rather than guess.
   */
  get(origin: string): ClientHttp2Session | { waiting: Promise<void> } | undefined {
    const list = this.#sessions.get(origin);
    if (list === undefined) return undefined;
    let waiting: ClientHttp2Session | undefined;
    for (const s of list) {
      if (s.closed || s.destroyed) continue;
      if (!this.#settled.has(s)) waiting ??= s;
      else if ((this.#open.get(s) ?? 0) < (s.remoteSettings.maxConcurrentStreams ?? 100)) return s;
    }
    if (waiting === undefined) return undefined;
    let settled = this.#settling.get(waiting);
    if (settled === undefined) {
      const s = waiting;
      settled = new Promise<void>((resolve) => {
        // A peer that never sends its settings is taken at its word after a while: the
        // stream's own timeouts then apply.
        const timer = setTimeout(() => {
          this.#settled.add(s);
          done();
        }, SETTINGS_WAIT_MS);
        timer.unref();
        const done = () => {
          clearTimeout(timer);
          s.off("remoteSettings", done);
          s.off("close", done);
          resolve();
        };
        s.once("remoteSettings", done);
        s.once("close", done);
      });
      this.#settling.set(s, settled);
    }
    return { waiting: settled };
  }

  /** Starts a session on a connection that negotiated `h2` (the probe's or a new one). */
  adopt(origin: string, socket: Socket): ClientHttp2Session {
    const session = h2connect(origin, {
      createConnection: () => socket,
      settings: { enablePush: false },
    });
    const list = this.#sessions.get(origin);
    if (list === undefined) this.#sessions.set(origin, [session]);
    else list.push(session);
    this.#open.set(session, 0);
    session.once("remoteSettings", () => this.#settled.add(session));
    const forget = () => {
      const now = this.#sessions.get(origin);
      const i = now?.indexOf(session) ?? -1;
      if (i < 0) return;
      now!.splice(i, 1);
      if (now!.length === 0) this.#sessions.delete(origin);
    };
    session.on("error", forget);
    session.once("goaway", forget);
    session.once("close", forget);
    session.setTimeout(IDLE_MS, () => session.close());
    return session;
  }

  /** Sends one request on `session`, reporting to `handler` as undici's dispatch does. */
  request(session: ClientHttp2Session, o: H2DispatchOptions, handler: Dispatcher.DispatchHandler): void {
    let stream: ClientHttp2Stream;
    let settled = false;
    let trailers: IncomingHttpHeaders = {};
    const controller = {
      aborted: false,
      paused: false,
      reason: null as Error | null,
      abort(reason: Error) {
        if (controller.aborted || settled) return;
        controller.aborted = true;
        controller.reason = reason;
        if (stream !== undefined && !stream.destroyed) stream.close(constants.NGHTTP2_CANCEL);
        fail(reason);
      },
      pause() {
        controller.paused = true;
        stream?.pause();
      },
      resume() {
        controller.paused = false;
        stream?.resume();
      },
    };
    const fail = (err: Error) => {
      if (settled) return;
      settled = true;
      handler.onResponseError?.(controller as unknown as Dispatcher.DispatchController, err);
    };
    const c = controller as unknown as Dispatcher.DispatchController;
    handler.onRequestStart?.(c, {});
    if (controller.aborted) return;
    try {
      stream = session.request(h2RequestHeaders(o), { endStream: o.body === null });
    } catch (err) {
      fail(err as Error);
      return;
    }
    let started = false;
    let closed = false;
    // Silence is timed here rather than by stream.setTimeout: under load node left that timer
    // armed after some streams had closed, and it kept each such stream and its whole exchange
    // alive for the timeout's length (30 minutes by default; decision 180).
    const onSilence = () => {
      const code = started ? "UND_ERR_BODY_TIMEOUT" : "UND_ERR_HEADERS_TIMEOUT";
      stream.close(constants.NGHTTP2_CANCEL);
      fail(new UpstreamStreamError(`the upstream stream was silent too long (${code})`, code));
    };
    let silence = setTimeout(onSilence, o.headersTimeout);
    silence.unref();
    this.#open.set(session, (this.#open.get(session) ?? 0) + 1);
    // node emits 'response' on the next tick after the HEADERS frame, but a DATA frame read in
    // the same turn reaches a flowing stream's 'data' at once: a busy session (many streams)
    // hands over body bytes before their head. They are kept until the head has gone on.
    let early: Buffer[] | undefined;
    const onResponse = (h: IncomingHttpHeaders & IncomingHttpStatusHeader) => {
      started = true;
      clearTimeout(silence);
      if (!closed) {
        silence = setTimeout(onSilence, o.bodyTimeout);
        silence.unref();
      }
      if (settled) return;
      const status = Number(h[constants.HTTP2_HEADER_STATUS]);
      handler.onResponseStart?.(c, status, responseHeaders(h), "");
      if (early === undefined) return;
      const chunks = early;
      early = undefined;
      for (const chunk of chunks) if (!settled) handler.onResponseData?.(c, chunk);
    };
    const onData = (chunk: Buffer) => {
      silence.refresh();
      if (settled) return;
      if (started) handler.onResponseData?.(c, chunk);
      else if (early === undefined) early = [chunk];
      else early.push(chunk);
    };
    const onTrailers = (t: IncomingHttpHeaders) => {
      trailers = responseHeaders(t);
    };
    // A reset ends the readable side as END_STREAM does, and node reports its code only after
    // 'end': the answer's end is decided a turn later, when a reset has made itself known
    // (its 'error' fails the request first).
    let ended = false;
    const onEnd = () => {
      ended = true;
      setImmediate(() => {
        if (settled) return;
        const rst = stream.rstCode;
        if (rst !== undefined && rst !== constants.NGHTTP2_NO_ERROR) {
          fail(
            new UpstreamStreamError(
              `the upstream reset the stream (code ${rst})`,
              "ERR_HTTP2_STREAM_ERROR",
              rst,
            ),
          );
          return;
        }
        if (!started) {
          fail(new UpstreamStreamError("the upstream ended the stream without an answer", "UND_ERR_SOCKET"));
          return;
        }
        settled = true;
        handler.onResponseEnd?.(c, trailers);
      });
    };
    const onError = (err: NodeJS.ErrnoException) => {
      fail(new UpstreamStreamError(err.message, err.code ?? "ERR_HTTP2_STREAM_ERROR", stream.rstCode));
    };
    // The request's listeners, removed at 'close' (a stream's last event): node 20 keeps a
    // closed client stream until a full garbage collection, and with them the request's whole
    // exchange, promoted to the old generation with it (decision 182).
    const listeners = Object.entries({
      response: onResponse,
      data: onData,
      trailers: onTrailers,
      end: onEnd,
      error: onError,
    });
    const onClose = () => {
      closed = true;
      clearTimeout(silence);
      this.#open.set(session, (this.#open.get(session) ?? 1) - 1);
      for (const [event, listener] of listeners) stream.off(event, listener);
      stream.on("error", ignoreError);
      // After 'end', the deferred check above decides.
      if (settled || ended) return;
      const rst = stream.rstCode;
      fail(
        new UpstreamStreamError(`the upstream reset the stream (code ${rst})`, "ERR_HTTP2_STREAM_ERROR", rst),
      );
    };
    for (const [event, listener] of listeners) stream.on(event, listener);
    stream.once("close", onClose);
    if (o.body === null) return;
    if (Buffer.isBuffer(o.body)) {
      stream.end(o.body);
      return;
    }
    const body = o.body;
    body.on("error", () => controller.abort(new Error("the request body failed")));
    // A body still being sent is activity too, as it was for node's stream timer.
    body.on("data", () => {
      if (!closed) silence.refresh();
    });
    body.pipe(stream);
  }

  close(): void {
    for (const list of this.#sessions.values()) for (const s of list) s.close();
    this.#sessions.clear();
  }

  destroy(): void {
    for (const list of this.#sessions.values()) for (const s of list) s.destroy();
    this.#sessions.clear();
  }
}
