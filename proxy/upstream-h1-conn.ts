// One keep-alive HTTP/1.1 connection of the request path's upstream client (decision 188): it
// writes a request, parses its answer with node's llhttp binding (upstream-h1-wire.ts) and hands
// it to the request's handler, then goes back to its pool (upstream-h1.ts), which keeps idle
// connections per origin.
//   - the request: head and an in-memory body in one write; a streamed body as it comes, by its
//     content-length or chunked, paused while the connection's buffer is full;
//   - the answer: head, data with pause/resume, trailers at the end; 1xx skipped, HEAD bodiless;
//     a body with a content-length passes as views of the socket's reads (#passBody); a head
//     that comes whole is parsed alone (decision 204);
//   - it stays open until a second before the upstream's `Keep-Alive: timeout` (else 30 s);
//     silence past a request's timeouts fails the request.
import type { Socket } from "node:net";
import type { Readable } from "node:stream";
import type { Dispatcher } from "undici";
import type { H1Request } from "./upstream-h1-request.js";
import {
  getDeclared,
  HTTPParser,
  headEnd,
  headerObject,
  type IncomingHeaders,
  type Parser,
  requestHead,
  withoutReadAhead,
} from "./upstream-h1-wire.js";
import { UpstreamStreamError } from "./upstream-h2.js";

/** Idle time when the upstream does not say (`Keep-Alive: timeout=N`). */
const IDLE_MS = 30_000;
/** The most an upstream's own keep-alive hint may keep a connection. */
const MAX_IDLE_MS = 600_000;

const KEEP_ALIVE_TIMEOUT = /timeout=(\d+)/i;

/** What a connection needs of its pool (H1Pools in upstream-h1.ts). */
export interface ConnPool {
  /** The connection is free for the next request of its origin. */
  idle(conn: H1Conn): void;
  /** The connection is closed: out of the pool. */
  forget(conn: H1Conn): void;
}

/** One keep-alive connection to an origin and its parser. */
export class H1Conn {
  readonly parser: Parser;
  current: H1Request | undefined;
  /** The answer being parsed is a 1xx: skipped. */
  informational = false;
  keepAlive = true;
  idleMs = IDLE_MS;
  idleSince = 0;
  dead = false;
  /** The answer has ended: `maybeRelease` may give the connection back. */
  answered = false;
  #trailers: string[] | undefined;
  #partial: string[] = [];
  #timer: NodeJS.Timeout | undefined;
  #timerMs = 0;
  /** Body bytes of the answer under way that `read` passes through without the parser. */
  #rawLeft = 0;
  /** The upstream began a message after the answer had ended: the connection is closed. */
  #unsolicited = false;
  /** `read` is under way (see there). */
  #reading = false;
  /** The parse under way has the head alone, up to its blank line (see #take). */
  #exact = false;
  /** The parser may hold part of the answer's next head: the rest of it goes in whole. */
  #headPart = false;
  /** Heads the parser has ended: tells a parse that ended one from one that did not. */
  #heads = 0;
  /** Whether the message hooks are on the parser (see #hooks). */
  #beginHooked = true;
  #endHooked = true;

  constructor(
    readonly pools: ConnPool,
    readonly origin: string,
    readonly socket: Socket,
    /** Order of opening: the oldest idle connection is used first (see H1Pools.idle). */
    readonly id: number,
  ) {
    const P = HTTPParser!;
    const parser = new P();
    parser.initialize(P.RESPONSE, {}, 0, P.kLenientNone);
    parser[P.kOnMessageBegin] = this.#onBegin;
    parser[P.kOnHeaders] = (lines: string[]) => {
      if (this.current?.head) this.#trailers = (this.#trailers ?? []).concat(lines);
      else this.#partial = this.#partial.concat(lines);
    };
    parser[P.kOnHeadersComplete] = this.#onHead;
    parser[P.kOnBody] = this.#onBody;
    parser[P.kOnMessageComplete] = this.#onEnd;
    this.parser = parser;
    withoutReadAhead(socket);
    socket.on("data", this.#onData);
    socket.on("end", this.#onSocketEnd);
    socket.on("error", this.#onError);
    socket.on("close", this.#onClose);
  }

  /** Activity: restarts the silence timer of the request under way. */
  touch(): void {
    this.#timer?.refresh();
  }

  start(x: H1Request): void {
    this.current = x;
    this.answered = false;
    // The parser stands between messages here: a connection goes back idle only once its last
    // answer has ended, and a head that stopped the parser as an upgrade does (#onHead's 2) had
    // it initialized afresh right after (#take).
    this.#headPart = false;
    x.conn = this;
    // Paused before it had a connection: nothing of the answer goes over until it resumes.
    if (x.paused) this.pause();
    const ms = x.o.headersTimeout;
    if (this.#timer === undefined || this.#timerMs !== ms) {
      if (this.#timer !== undefined) clearTimeout(this.#timer);
      this.#timer = setTimeout(this.#onSilence, ms);
      this.#timer.unref();
      this.#timerMs = ms;
    } else this.#timer.refresh();
    const body = x.o.body;
    const inMemory = body === null || Buffer.isBuffer(body);
    let framing: { head: string; chunked: boolean };
    try {
      framing = requestHead(x.o, inMemory ? (body === null ? undefined : body.length) : undefined);
    } catch (err) {
      this.current = undefined;
      x.conn = undefined;
      this.pools.idle(this);
      x.fail(err as Error);
      return;
    }
    if (inMemory) {
      const bytes = body === null ? 0 : body.length;
      const out = Buffer.allocUnsafe(framing.head.length + bytes);
      out.write(framing.head, 0, "latin1");
      if (body !== null) body.copy(out, framing.head.length);
      this.socket.write(out);
      x.written = true;
      return;
    }
    this.socket.write(framing.head, "latin1");
    const declared = framing.chunked ? undefined : Number(getDeclared(x.o.headers));
    x.sendBody(body as Readable, framing.chunked, Number.isSafeInteger(declared) ? declared : undefined);
  }

  #onSilence = (): void => {
    const x = this.current;
    if (x === undefined || x.settled) return;
    // Not the upstream's silence: the client holds the answer back, or still sends its body.
    if (x.paused || !x.written) {
      this.#timer?.refresh();
      return;
    }
    const code = x.head ? "UND_ERR_BODY_TIMEOUT" : "UND_ERR_HEADERS_TIMEOUT";
    this.kill();
    x.fail(new UpstreamStreamError(`the upstream was silent too long (${code})`, code));
  };

  /**
   * The answer's bytes, as the socket reads them: on 'data', which node emits from inside the
   * read, where 'readable' took a `process.nextTick` for every read (about 5,000 instructions
   * on Node 22 and 24; decision 203). A paused request pauses the socket (`pause`), which then
   * keeps what comes in its buffer and stops reading from the connection once that is full.
   */
  #onData = (chunk: Buffer): void => {
    if (this.dead) return;
    const x = this.current;
    if (x === undefined) {
      // Bytes on an idle connection: nothing asked for them.
      this.kill();
      return;
    }
    this.#timer?.refresh();
    this.#reading = true;
    try {
      this.#take(chunk);
    } finally {
      this.#reading = false;
    }
    // A resume from inside a handler only cleared `paused` (see `read`): reading goes on now.
    if (this.#canGoOn()) this.read();
  };

  /** Stops the socket's 'data' for a paused request. */
  pause(): void {
    if (!this.dead) this.socket.pause();
  }

  /**
   * Goes on after a pause: first all the socket holds, as one chunk (a download's next write to
   * the client is then as large as what came meanwhile, rather than one TLS record), then
   * reading as it comes.
   */
  read = (): void => {
    if (this.#reading || !this.#canGoOn()) return;
    // In paused mode `read()` takes everything buffered, joined, and emits it as 'data'.
    this.socket.read();
    if (this.#canGoOn()) this.socket.resume();
  };

  /** The socket is paused, and nothing keeps it so: no request, or one not paused. */
  #canGoOn(): boolean {
    return !this.dead && this.socket.readableFlowing === false && this.current?.paused !== true;
  }

  /**
   * Parses `chunk`, or passes it on as body bytes (#passBody). A head that is here whole, up to
   * its blank line, is parsed alone (#exact): the parser ends the message at the head (#onHead's
   * 1) and stands ready for the next one. A parse that went on past the head had to be stopped
   * there as an upgrade stops it (2), which leaves llhttp's upgrade flag up, and with it up the
   * binding reports a parse error as a byte count, so the parser is initialized afresh after it;
   * that call, and the message hooks a head parsed alone does without, cost more than the rest
   * of the answer's parse (decision 204).
   */
  #take(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length && !this.dead) {
      if (this.#rawLeft > 0) {
        at = this.#passBody(chunk, at);
        continue;
      }
      let bytes = at === 0 ? chunk : chunk.subarray(at);
      const x = this.current;
      let exact = false;
      if (x !== undefined && !x.head && !this.#headPart) {
        const end = headEnd(bytes);
        if (end !== -1) {
          exact = true;
          if (end < bytes.length) bytes = bytes.subarray(0, end);
        }
      }
      this.#exact = exact;
      // Bytes past a head parsed alone are not in this parse: no message can begin after the
      // answer's, and its end is #onHead's to hook when the parser reads the body.
      this.#hooks(!exact, !exact);
      const heads = this.#heads;
      const r = this.#parse(bytes);
      if (r === undefined) return;
      // A head whose body is passed through ends the parse there; any other parse takes every
      // byte, and a message begun after the answer ended (#unsolicited) is one nothing asked for.
      if (this.#unsolicited || (this.#rawLeft > 0 ? r <= 0 || r > bytes.length : r !== bytes.length)) {
        this.kill();
        return;
      }
      // Only a head parsed alone leaves the parser between messages: any other parse took
      // every byte, and past a 1xx head it ended, part of the next head may be in the parser.
      this.#headPart = !(exact && this.#heads !== heads);
      if (this.#rawLeft > 0 && !exact) {
        const P = HTTPParser!;
        this.parser.initialize(P.RESPONSE, {}, 0, P.kLenientNone);
      }
      at += r;
    }
  }

  /** Puts the message hooks on the parser or takes them off: node calls only what is there. */
  #hooks(begin: boolean, end: boolean): void {
    const P = HTTPParser!;
    if (begin !== this.#beginHooked) {
      this.#beginHooked = begin;
      this.parser[P.kOnMessageBegin] = begin ? this.#onBegin : undefined;
    }
    if (end !== this.#endHooked) {
      this.#endHooked = end;
      this.parser[P.kOnMessageComplete] = end ? this.#onEnd : undefined;
    }
  }

  #onBegin = (): void => {
    const x = this.current;
    if (x === undefined || x.settled) this.#unsolicited = true;
  };

  /**
   * Hands over body bytes of an answer with a content-length as they are, views of what the
   * socket read: node's parser would copy each piece into a new buffer. A request that pauses
   * while it is handed a chunk still gets the rest of that chunk; the socket keeps what comes
   * after (`pause`). Returns where in `chunk` it stopped.
   */
  #passBody(chunk: Buffer, at: number): number {
    const x = this.current!;
    const take = Math.min(this.#rawLeft, chunk.length - at);
    const piece = at === 0 && take === chunk.length ? chunk : chunk.subarray(at, at + take);
    this.#rawLeft -= take;
    const next = at + take;
    // Bytes past the body are an answer nothing asked for: the connection cannot be trusted
    // with another request (its bytes could pass for that request's answer).
    if (this.#rawLeft === 0 && next < chunk.length) this.keepAlive = false;
    try {
      if (!x.settled) x.handler.onResponseData?.(x as unknown as Dispatcher.DispatchController, piece);
      if (this.#rawLeft === 0) this.#finish(x, undefined);
    } catch (err) {
      // A handler that threw (undici fails the request the same way).
      this.kill();
      x.fail(err as Error);
      return chunk.length;
    }
    if (next < chunk.length && this.#rawLeft === 0) {
      this.kill();
      return chunk.length;
    }
    return next;
  }

  /** Runs the parser over `bytes`: how many it took, or undefined when the connection failed. */
  #parse(bytes: Buffer): number | undefined {
    let r: number | Error;
    try {
      r = this.parser.execute(bytes);
    } catch (err) {
      // A handler that threw (undici fails the request the same way).
      const failed = this.current;
      this.kill();
      failed?.fail(err as Error);
      return undefined;
    }
    if (r instanceof Error) {
      this.kill();
      const code = (r as { code?: string }).code ?? "HPE_INVALID";
      this.current?.fail(
        Object.assign(new Error(`the upstream's answer is not valid HTTP/1.1 (${code})`), {
          code: "UND_ERR_SOCKET",
        }),
      );
      return undefined;
    }
    return r;
  }

  #onHead = (
    _major: number,
    _minor: number,
    lines: string[] | undefined,
    _method: unknown,
    _url: unknown,
    status: number,
    message: string,
    upgrade: boolean,
    keepAlive: boolean,
  ): number => {
    const x = this.current;
    if (lines === undefined) {
      lines = this.#partial;
      this.#partial = [];
    }
    if (x === undefined || x.settled) {
      // An answer nothing asked for.
      this.kill();
      return 1;
    }
    this.#heads++;
    if (status < 200) {
      if (status === 101 || upgrade) {
        this.kill();
        x.fail(
          Object.assign(new Error("the upstream switched protocols unasked"), { code: "UND_ERR_SOCKET" }),
        );
        return 1;
      }
      this.informational = true;
      this.#hooks(this.#beginHooked, true);
      return 0;
    }
    this.informational = false;
    this.keepAlive = keepAlive;
    this.idleMs = IDLE_MS;
    const headers = headerObject(lines);
    const hint = headers["keep-alive"];
    if (typeof hint === "string") {
      const s = KEEP_ALIVE_TIMEOUT.exec(hint);
      if (s !== null) this.idleMs = Math.min(Number(s[1]) * 1000 - 1000, MAX_IDLE_MS);
    }
    x.head = true;
    if (this.#timerMs !== x.o.bodyTimeout) {
      clearTimeout(this.#timer);
      this.#timer = setTimeout(this.#onSilence, x.o.bodyTimeout);
      this.#timer.unref();
      this.#timerMs = x.o.bodyTimeout;
    }
    x.handler.onResponseStart?.(x as unknown as Dispatcher.DispatchController, status, headers, message);
    // A body of known length is passed through by `read` (#passBody), not by the parser. The
    // message ends at its head: with 1 when the parse has the head alone (#take), else with 2,
    // which stops the parse there as for an upgrade (node's execute then says how many bytes
    // the head took). The parser sees the end of any other answer (#onEnd).
    const length = headers["content-length"];
    if (
      x.o.method === "HEAD" ||
      status === 204 ||
      status === 304 ||
      typeof length !== "string" ||
      headers["transfer-encoding"] !== undefined
    )
      return this.#parserEnds(x.o.method === "HEAD" ? 1 : 0);
    const n = Number(length);
    if (!(n > 0) || !Number.isSafeInteger(n) || this.current !== x || x.settled) return this.#parserEnds(0);
    this.#rawLeft = n;
    return this.#exact ? 1 : 2;
  };

  /** `result`, for an answer whose end the parser sees: its end hook goes on. */
  #parserEnds(result: 0 | 1): 0 | 1 {
    this.#hooks(this.#beginHooked, true);
    return result;
  }

  #onBody = (chunk: Buffer): void => {
    const x = this.current;
    if (x === undefined || x.settled) return;
    x.handler.onResponseData?.(x as unknown as Dispatcher.DispatchController, chunk);
  };

  #onEnd = (): void => {
    if (this.informational) {
      this.informational = false;
      return;
    }
    // The head of an answer whose body `read` passes through: it ends with its last byte.
    if (this.#rawLeft > 0) return;
    const x = this.current;
    if (x === undefined || x.settled) return;
    const trailers = this.#trailers === undefined ? {} : headerObject(this.#trailers);
    this.#trailers = undefined;
    this.#finish(x, trailers);
  };

  /** The answer has ended: the connection goes back (or is closed), then the handler hears. */
  #finish(x: H1Request, trailers: IncomingHeaders | undefined): void {
    if (x.settled) return;
    x.settled = true;
    this.answered = true;
    if (!x.written) {
      // The upstream answered before it had the whole request: this connection cannot carry
      // another one.
      x.stopBody();
      this.current = undefined;
      x.conn = undefined;
      this.kill();
    } else this.maybeRelease(x);
    x.handler.onResponseEnd?.(x as unknown as Dispatcher.DispatchController, trailers ?? {});
  }

  /** Back to the idle list once the answer has ended and the request was written whole. */
  maybeRelease(x: H1Request): void {
    if (this.current !== x || !this.answered || !x.written) return;
    this.current = undefined;
    x.conn = undefined;
    if (!this.keepAlive || this.idleMs <= 0 || this.dead) {
      this.kill();
      return;
    }
    this.pools.idle(this);
    // A socket the request left paused reads again: bytes that came meanwhile (an upstream's
    // unasked-for extra) are looked at now rather than left unread.
    if (!this.#reading) this.read();
  }

  #onSocketEnd = (): void => {
    if (this.dead) return;
    // An answer without a length ends with the connection.
    const r =
      this.current === undefined ? undefined : this.#rawLeft > 0 ? new Error("cut") : this.parser.finish();
    const x = this.current;
    this.kill();
    if (x !== undefined && !x.settled) {
      const why =
        r instanceof Error
          ? "the upstream closed the connection in the middle of its answer"
          : "the upstream closed the connection";
      x.fail(Object.assign(new Error(why), { code: "UND_ERR_SOCKET" }));
    }
  };

  #onError = (err: Error): void => {
    const x = this.current;
    this.kill();
    x?.fail(err);
  };

  #onClose = (): void => {
    this.dead = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.pools.forget(this);
    const x = this.current;
    this.current = undefined;
    if (x !== undefined && !x.settled)
      x.fail(Object.assign(new Error("the upstream closed the connection"), { code: "UND_ERR_SOCKET" }));
    this.socket.off("data", this.#onData);
    this.socket.off("end", this.#onSocketEnd);
    // A parser is freed only here: never while it is inside execute (a data event).
    this.parser.close();
  };

  kill(): void {
    if (this.dead) return;
    this.dead = true;
    this.pools.forget(this);
    this.socket.destroy();
  }
}
