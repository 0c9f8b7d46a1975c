// keybroker's own HTTP/1.1 server for intercepted connections (decision 189), in place of node's
// http.Server on the request path: node's llhttp binding reads each request head, node's
// IncomingMessage carries the request (its header rules, its stream), and h1-response.ts
// answers in one write of head and body.
//
// It serves the requests an agent sends: HTTP/1.1, a body of declared length or none. Anything
// else (an upgrade, `Expect`, a chunked body, HTTP/1.0, CONNECT, a method node's table names
// only in full, a head the parser refuses) hands the connection to node's server for good: the
// bytes of the message from its first one are put back in front of the socket, and node reads
// them as if it had had the connection from the start, with every answer it gives today.
//
// A request's body bytes are passed on as views of the socket's reads. A request that arrives
// while the previous answer is still going out waits, the socket paused (pipelining, answered
// in order). Timeouts (docs/spec.md §3.8): the first head and any head once begun must arrive
// within `timeouts.headers` (a 408, as node answers), an idle connection is closed after
// `timeouts.keepAlive`; one sweep a second (or a quarter of the headers timeout) checks them.
import type { Server as HttpServer, IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import { http } from "../../core/node-http.js";
import { HTTPParser, headEnd, type Parser, REQUEST_METHODS, withoutReadAhead } from "../upstream-h1-wire.js";
import { onClientError } from "./client-errors.js";
import { checkingIntervalMs } from "./connection-limits.js";
import { H1Response } from "./h1-response.js";

/** Whether this node has what the server needs; without it node's server reads every connection. */
export const H1_SERVER_AVAILABLE =
  HTTPParser !== undefined &&
  REQUEST_METHODS !== undefined &&
  typeof (http.IncomingMessage.prototype as unknown as { _addHeaderLines?: unknown })._addHeaderLines ===
    "function";

/** node's default limit on header lines kept per request (maxHeadersCount). */
const MAX_HEADER_PAIRS = 2000;

export interface H1ServerOptions {
  /** node's server, for the connections this one hands over. */
  readonly fallback: HttpServer;
  readonly headersMs: () => number;
  readonly keepAliveMs: () => number;
  readonly onRequest: (req: IncomingMessage, res: H1Response) => void;
}

/** A request head as the parser gave it, started once the parse returns. */
interface Head {
  readonly method: string;
  readonly url: string;
  readonly lines: string[];
  readonly keepAlive: boolean;
  readonly length: number;
}

/**
 * Bytes of one head kept at most, counting what llhttp skips without counting (blank lines
 * before a request, spaces): twice node's header limit.
 */
const HEAD_BYTES_MAX = 2 * http.maxHeaderSize;
const OVERFLOW = Object.assign(new Error("the request headers are too large"), {
  code: "HPE_HEADER_OVERFLOW",
});
const CUT = Object.assign(new Error("the client closed in the middle of a request head"), {
  code: "HPE_INVALID_EOF_STATE",
});

const TIMEOUT = Object.assign(new Error("the request headers did not arrive in time"), {
  code: "ERR_HTTP_REQUEST_TIMEOUT",
});

export class H1Server {
  readonly #o: H1ServerOptions;
  /**
   * Every connection served and not yet stopped. The sweep looks at each, and each tells by
   * itself whether it is between requests (idle, or reading a head): a connection does not move
   * in or out of a set with every request.
   */
  readonly #conns = new Set<Conn>();
  #sweep: NodeJS.Timeout | undefined;
  #sweepMs = 0;
  #closed = false;

  constructor(o: H1ServerOptions) {
    this.#o = o;
  }

  get options(): H1ServerOptions {
    return this.#o;
  }

  /** Serves a decrypted connection (its TLS handshake may still be under way). */
  serve(socket: Socket): void {
    if (this.#closed) {
      socket.destroy();
      return;
    }
    new Conn(this, socket);
    this.#startSweep();
  }

  add(conn: Conn): void {
    this.#conns.add(conn);
  }

  remove(conn: Conn): void {
    this.#conns.delete(conn);
  }

  close(): void {
    this.#closed = true;
    clearInterval(this.#sweep);
    this.#sweep = undefined;
  }

  #startSweep(): void {
    const ms = checkingIntervalMs(this.#o.headersMs());
    if (this.#sweep !== undefined && ms === this.#sweepMs) return;
    clearInterval(this.#sweep);
    this.#sweepMs = ms;
    this.#sweep = setInterval(this.#onSweep, ms);
    this.#sweep.unref();
  }

  #onSweep = (): void => {
    if (this.#conns.size === 0) return;
    const now = performance.now();
    const headersMs = this.#o.headersMs();
    const keepAliveMs = this.#o.keepAliveMs();
    for (const conn of this.#conns) conn.check(now, headersMs, keepAliveMs);
  };
}

class Conn {
  readonly #server: H1Server;
  readonly socket: Socket;
  readonly #parser: Parser;
  /** When the connection began to wait: for its first head, for a head begun, or idle. */
  #since = performance.now();
  /** A head is due: the first request's, or one whose first bytes came. */
  #headDue = true;
  /** Bytes of the head being read, from its first one (a hand-over puts them back). */
  #headBytes: Buffer[] = [];
  #headSize = 0;
  #partial: string[] = [];
  #partialUrl = "";
  #ready: Head | undefined;
  #handOver = false;
  /** The parse under way has a head alone, up to its blank line (see #feed). */
  #exact = false;
  /** The request under way, until its answer has gone out. */
  #req: IncomingMessage | undefined;
  #res: H1Response | undefined;
  /** Body bytes still to come, and the request they are for (which may have been answered). */
  #bodyLeft = 0;
  #bodyOf: IncomingMessage | undefined;
  /** Bytes after the current request, held until its answer has gone out. */
  #pending: Buffer | undefined;
  #dead = false;

  constructor(server: H1Server, socket: Socket) {
    this.#server = server;
    this.socket = socket;
    const P = HTTPParser!;
    const parser = new P();
    parser.initialize(P.REQUEST, {}, 0, P.kLenientNone);
    parser[P.kOnHeaders] = this.#onHeaders;
    parser[P.kOnHeadersComplete] = this.#onHead;
    this.#parser = parser;
    withoutReadAhead(socket);
    socket.on("data", this.#onData);
    socket.on("end", this.#onEnd);
    socket.on("error", this.#onError);
    socket.on("close", this.#onClose);
    server.add(this);
  }

  /**
   * The sweep: a head late past `timeouts.headers` gets a 408, an idle connection is closed; one
   * with a request under way is left alone.
   */
  check(now: number, headersMs: number, keepAliveMs: number): void {
    if (this.#dead || this.#res !== undefined) return;
    if (this.#headDue) {
      if (now - this.#since < headersMs) return;
      this.#stop();
      onClientError(TIMEOUT, this.socket);
    } else if (now - this.#since >= keepAliveMs) this.socket.destroy();
  }

  keepAliveSeconds(): number {
    return Math.floor(this.#server.options.keepAliveMs() / 1000);
  }

  /** The answer under way went out whole: on to the next request, or close. */
  finished(res: H1Response, close: boolean): void {
    if (res !== this.#res || this.#dead) return;
    this.#res = undefined;
    const req = this.#req!;
    this.#req = undefined;
    // A body nobody read (a refusal answered before it): read on and dropped, as node does,
    // so that the next request starts where it should.
    const node = req as unknown as { _consuming?: boolean; _dump?: () => void };
    if (this.#bodyLeft > 0 && !node._consuming) node._dump?.();
    if (close) {
      this.#stop();
      this.socket.end();
      return;
    }
    this.#waitForHead();
    const pending = this.#pending;
    if (pending === undefined) return;
    this.#pending = undefined;
    this.#feed(pending, 0);
    if (this.#pending === undefined && !this.#dead && !this.#handOver) this.socket.resume();
  }

  #waitForHead(): void {
    this.#since = performance.now();
    this.#headDue = false;
  }

  #onData = (chunk: Buffer): void => {
    this.#feed(chunk, 0);
  };

  #feed(chunk: Buffer, at: number): void {
    while (at < chunk.length && !this.#dead) {
      if (this.#bodyLeft > 0) {
        at = this.#passBody(chunk, at);
        continue;
      }
      if (this.#res !== undefined) {
        // The next request, before the answer to this one is out: it waits, and so do the
        // bytes behind it.
        this.#pending = at === 0 ? chunk : chunk.subarray(at);
        this.socket.pause();
        return;
      }
      const rest = at === 0 ? chunk : chunk.subarray(at);
      if (!this.#headDue) {
        this.#headDue = true;
        this.#since = performance.now();
      }
      // A head that is here whole, up to its blank line, is parsed alone: the parser ends the
      // message at the head (#onHead's 1) and stands ready for the next. A head that came in
      // pieces stops the parse as an upgrade does (2), which leaves llhttp's upgrade flag up,
      // and with it up the binding reports a parse error as a count: the parser is initialized
      // afresh after such a head, a call that costs more than the rest of the parse (decision 204).
      let bytes = rest;
      let exact = false;
      if (this.#headBytes.length === 0) {
        const end = headEnd(rest);
        if (end !== -1) {
          exact = true;
          if (end < rest.length) bytes = rest.subarray(0, end);
        }
      }
      this.#exact = exact;
      const r = this.#parser.execute(bytes);
      const head = this.#ready;
      // A parse that stops short without a head is an error the binding reports as a count.
      if (typeof r !== "number" || this.#handOver || (head === undefined && r !== bytes.length)) {
        this.#giveUp(rest);
        return;
      }
      if (head === undefined) {
        // The head goes on in the next read. Bytes llhttp does not count against the header
        // limit (blank lines before it, spaces) still count here: what is kept is bounded.
        this.#headSize += bytes.length;
        if (this.#headSize > HEAD_BYTES_MAX) {
          this.#stop();
          onClientError(OVERFLOW, this.socket);
          return;
        }
        this.#headBytes.push(bytes);
        at += bytes.length;
        continue;
      }
      this.#ready = undefined;
      // A head that came in one read kept nothing, and emptying an empty array is still a call
      // into V8's runtime.
      if (this.#headBytes.length !== 0) this.#headBytes.length = 0;
      this.#headSize = 0;
      if (!exact) this.#parser.initialize(HTTPParser!.REQUEST, {}, 0, HTTPParser!.kLenientNone);
      at += r;
      const req = this.#start(head);
      // The body bytes that came with the head go in first: a request whose body is whole when
      // it is handed on can be read at once, without waiting for another turn (decision 190).
      if (this.#bodyLeft > 0 && at < chunk.length) at = this.#passBody(chunk, at);
      this.#server.options.onRequest(req, this.#res!);
    }
  }

  #onHeaders = (lines: string[], url: string): void => {
    for (const l of lines) this.#partial.push(l);
    this.#partialUrl += url;
  };

  /** Inside the parse: notes the head, and ends the message there (1, or 2 as for an upgrade: #feed). */
  #onHead = (
    major: number,
    minor: number,
    lines: string[] | undefined,
    method: number,
    url: string | undefined,
    _status: unknown,
    _message: unknown,
    upgrade: boolean,
    keepAlive: boolean,
  ): number => {
    if (lines === undefined) {
      lines = this.#partial;
      this.#partial = [];
    }
    if (url === undefined) {
      url = this.#partialUrl;
      this.#partialUrl = "";
    }
    const name = REQUEST_METHODS![method];
    const length = major === 1 && minor === 1 && !upgrade ? simpleLength(lines) : undefined;
    if (name === undefined || name === "CONNECT" || length === undefined) {
      this.#handOver = true;
      return 2;
    }
    this.#ready = { method: name, url, lines, keepAlive, length };
    return this.#exact ? 1 : 2;
  };

  /** A request and its answer for a head; the caller hands them on. */
  #start(head: Head): IncomingMessage {
    const socket = this.socket;
    const req = new http.IncomingMessage(socket);
    // As if a reader had already asked (decision 201): node's Readable holds back what it would
    // say to a reader until the first read, so the end of a body that came whole with its head
    // was said on a tick of its own (about 5,000 instructions on Node 22 and 24). Nothing here
    // listens before `onRequest`, and a reader that comes later finds the bytes waiting.
    const state = (req as unknown as { _readableState?: { sync?: boolean } })._readableState;
    if (state !== undefined && typeof state.sync === "boolean") state.sync = false;
    req.httpVersionMajor = 1;
    req.httpVersionMinor = 1;
    req.httpVersion = "1.1";
    req.url = head.url;
    req.method = head.method;
    const lines = head.lines;
    const n = Math.min(lines.length, MAX_HEADER_PAIRS * 2);
    (req as unknown as { _addHeaderLines(lines: string[], n: number): void })._addHeaderLines(lines, n);
    const res = new H1Response(this, head.method, head.keepAlive);
    this.#req = req;
    this.#res = res;
    this.#bodyLeft = head.length;
    this.#bodyOf = req;
    if (head.length === 0) {
      req.complete = true;
      req.push(null);
    }
    return req;
  }

  /** Body bytes of the current request, as views of the read; returns where they stop. */
  #passBody(chunk: Buffer, at: number): number {
    const take = Math.min(this.#bodyLeft, chunk.length - at);
    // Body bytes after an early answer: the connection is not idle while they come.
    if (this.#res === undefined) this.#since = performance.now();
    const piece = at === 0 && take === chunk.length ? chunk : chunk.subarray(at, at + take);
    this.#bodyLeft -= take;
    const req = this.#bodyOf!;
    if (!req.destroyed) {
      const more = req.push(piece);
      if (this.#bodyLeft === 0) {
        req.complete = true;
        req.push(null);
      } else if (!more) this.socket.pause();
    }
    if (this.#bodyLeft === 0) this.#bodyOf = undefined;
    return at + take;
  }

  /**
   * What this server does not serve: node's server takes the connection, with the bytes of
   * the message from its first one put back in front of the socket.
   */
  #giveUp(last: Buffer): void {
    const bytes = this.#headBytes.length === 0 ? last : Buffer.concat([...this.#headBytes, last]);
    const socket = this.socket;
    // Paused, so that node's reading starts with a resume that passes the bytes put back to it
    // first (a flowing socket would keep them buffered until the client sent more).
    socket.pause();
    this.#stop();
    socket.unshift(bytes);
    this.#server.options.fallback.emit("connection", socket);
    socket.resume();
  }

  /** Detaches this server from the socket: its end, a hand-over, a refusal. */
  #stop(): void {
    if (this.#dead) return;
    this.#dead = true;
    this.#server.remove(this);
    const socket = this.socket;
    socket.off("data", this.#onData);
    socket.off("end", this.#onEnd);
    socket.off("close", this.#onClose);
    // The error listener stays: a socket error after a hand-over or a refusal only closes it.
    this.#headBytes.length = 0;
    // Not from inside the parse: every caller runs after `execute` has returned.
    this.#parser.close();
  }

  /**
   * The client ended its side. As node's server (without half-open connections): a request
   * still under way is aborted and the connection closed, which tells the pipeline the client
   * went away.
   */
  #onEnd = (): void => {
    const req = this.#bodyOf ?? this.#req;
    if (this.#res === undefined && this.#headDue && this.#headBytes.length > 0) {
      // Cut in the middle of a head: a 400, as node's server answers.
      this.#stop();
      onClientError(CUT, this.socket);
      return;
    }
    if (req !== undefined && !req.complete) {
      this.socket.destroy();
      return;
    }
    this.#stop();
    req?.destroy(Object.assign(new Error("aborted"), { code: "ECONNRESET" }));
    this.socket.end();
    if (this.#res !== undefined) this.socket.once("close", () => this.#res?.connectionClosed());
  };

  #onError = (): void => {
    this.socket.destroy();
  };

  #onClose = (): void => {
    const req = this.#bodyOf ?? this.#req;
    const res = this.#res;
    this.#stop();
    this.#pending = undefined;
    this.#bodyOf = undefined;
    if (req !== undefined && !req.complete)
      req.destroy(Object.assign(new Error("aborted"), { code: "ECONNRESET" }));
    res?.connectionClosed();
  };
}

/**
 * The body length of a request this server serves: its content-length (0 without one), or
 * undefined for one it hands over (a chunked body, `Expect`, a length that is not one number).
 */
function simpleLength(lines: readonly string[]): number | undefined {
  let length: number | undefined;
  for (let i = 0; i < lines.length; i += 2) {
    const name = lines[i]!;
    if (name.length === 14 && name.toLowerCase() === "content-length") {
      const n = Number(lines[i + 1]);
      if (length !== undefined || !Number.isSafeInteger(n) || n < 0) return undefined;
      length = n;
    } else if (
      (name.length === 17 && name.toLowerCase() === "transfer-encoding") ||
      (name.length === 6 && name.toLowerCase() === "expect")
    )
      return undefined;
  }
  return length ?? 0;
}
