// The answer to one request read by h1-server.ts (decision 189): the pipeline's ExchangeResponse
// over the client's socket, in place of node's ServerResponse. The head is held until the first
// body bytes (or `flushHeaders`, or `end`) and goes out with them in one write; a body without
// a declared length is sent chunked, each piece framed in one buffer; `end` before any body
// write declares the length instead, as node does.
import { EventEmitter } from "node:events";
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http";
import type { Socket } from "node:net";
import { http } from "../../core/node-http.js";
import type { ExchangeResponse } from "../exchange.js";
import { frameChunk } from "../response-body.js";

/** What a header value may hold: tab, visible ASCII and latin1 above 0x7f (node's own rule). */
const BAD_VALUE = /[^\t\x20-\x7e\x80-\xff]/;
const BAD_NAME = /[^!#$%&'*+\-.^_`|~0-9A-Za-z]/;
const CLOSE_TOKEN = /(?:^|,)\s*close\s*(?:,|$)/i;
/** Bodies up to this size go out in one buffer with the head; bigger ones in a gathered write. */
const COALESCE_BYTES = 16 * 1024;
const LAST_CHUNK = "0\r\n";

/** What the response needs from the connection it answers on. */
export interface H1Link {
  readonly socket: Socket;
  /** `timeout=` of the Keep-Alive field node would send. */
  keepAliveSeconds(): number;
  /** The response has gone out whole (`close`: the connection ends after it). */
  finished(res: H1Response, close: boolean): void;
}

function invalidHeader(name: string): TypeError {
  return Object.assign(new TypeError(`Invalid value for the "${name}" header`), {
    code: "ERR_HTTP_INVALID_HEADER_VALUE",
  });
}

function invalidChar(what: string): TypeError {
  return Object.assign(new TypeError(`Invalid character in ${what}`), { code: "ERR_INVALID_CHAR" });
}

let dateSecond = -1;
let dateText = "";
/** The Date field's value, formatted once a second. */
function utcDate(): string {
  const second = Math.floor(Date.now() / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    dateText = new Date(second * 1000).toUTCString();
  }
  return dateText;
}

/** Header lines for `name: value` (one per array element), checked so that none splits the head. */
function fieldLines(name: string, value: string | number | readonly string[], what: string): string {
  if (name === "" || BAD_NAME.test(name)) throw invalidChar(`${what} name ${JSON.stringify(name)}`);
  if (typeof value === "object") {
    let out = "";
    for (const v of value) out += fieldLines(name, v, what);
    return out;
  }
  const text = typeof value === "number" ? `${value}` : value;
  if (BAD_VALUE.test(text)) throw invalidChar(`${what} "${name}"`);
  return `${name}: ${text}\r\n`;
}

export class H1Response extends EventEmitter implements ExchangeResponse {
  readonly #link: H1Link;
  readonly #head: boolean;
  #keepAlive: boolean;
  #sent = false;
  /** The head, written with the first body bytes. */
  #pendingHead: string | undefined;
  /** Whether the head has declared how the body is framed (`content-length` or chunked). */
  #framed = false;
  #chunked = false;
  /** The body's declared length (undefined: chunked, or none). */
  #declared: number | undefined;
  #written = 0;
  #noBody = false;
  #ended = false;
  #finished = false;
  #closed = false;
  #destroyed = false;
  #waitingDrain = false;
  #trailers = "";

  constructor(link: H1Link, method: string, keepAlive: boolean) {
    super();
    this.#link = link;
    this.#head = method === "HEAD";
    this.#keepAlive = keepAlive;
  }

  get headersSent(): boolean {
    return this.#sent;
  }

  get destroyed(): boolean {
    return this.#destroyed || this.#link.socket.destroyed;
  }

  get writableFinished(): boolean {
    return this.#finished;
  }

  /** Whether the connection stays open after this answer (as node's ServerResponse has it). */
  get shouldKeepAlive(): boolean {
    return this.#keepAlive;
  }

  set shouldKeepAlive(keep: boolean) {
    this.#keepAlive = keep;
  }

  writeHead(status: number, reason?: string | OutgoingHttpHeaders, headers?: OutgoingHttpHeaders): this {
    if (this.#sent)
      throw Object.assign(new Error("the response head was sent already"), { code: "ERR_HTTP_HEADERS_SENT" });
    // Interim answers (1xx) are not written here: the pipeline passes none, and one would be
    // taken for the final answer (an upgrade's 101 is node's server's).
    if (!Number.isInteger(status) || status < 200 || status > 999)
      throw Object.assign(new RangeError(`Invalid status code: ${status}`), {
        code: "ERR_HTTP_INVALID_STATUS_CODE",
      });
    let fields = headers;
    let text = reason;
    if (typeof text !== "string") {
      fields = text;
      text = undefined;
    }
    const message = text ?? http.STATUS_CODES[status] ?? "unknown";
    if (BAD_VALUE.test(message)) throw invalidChar("status message");
    let head = `HTTP/1.1 ${status} ${message}\r\n`;
    let date = false;
    let connection = false;
    let te: string | undefined;
    let length: string | undefined;
    if (fields !== undefined) {
      for (const name in fields) {
        const value = fields[name];
        if (value === undefined) continue;
        head += fieldLines(name, value, "header");
        // Names are lower case nearly always (an upstream's answer's are), and common ones the
        // process's own strings (proxy/headers.ts lowerName): compared by identity first.
        switch (name.length) {
          case 4:
            if (name === "date" || name.toLowerCase() === "date") date = true;
            break;
          case 10:
            if (name === "connection" || name.toLowerCase() === "connection") {
              connection = true;
              if (CLOSE_TOKEN.test(String(value))) this.#keepAlive = false;
            }
            break;
          case 14:
            if (name === "content-length" || name.toLowerCase() === "content-length") {
              if (length !== undefined || typeof value === "object") throw invalidHeader("content-length");
              length = String(value);
            }
            break;
          case 17:
            if (name === "transfer-encoding" || name.toLowerCase() === "transfer-encoding")
              te = String(value);
            break;
        }
      }
    }
    this.#noBody = this.#head || status === 204 || status === 304;
    if (length !== undefined) {
      // One length, a number: anything else would frame the body some other way than it is sent.
      if (te !== undefined || !/^\d{1,15}$/.test(length)) throw invalidHeader("content-length");
      this.#framed = true;
      if (!this.#noBody) this.#declared = Number(length);
    } else if (te !== undefined) {
      this.#framed = true;
      this.#chunked = !this.#noBody && /(?:^|,)\s*chunked\s*$/i.test(te);
      // A body in another coding and not chunked ends only with the connection.
      if (!this.#chunked && !this.#noBody) this.#keepAlive = false;
    } else if (this.#noBody) this.#framed = true;
    if (!date) head += `Date: ${utcDate()}\r\n`;
    if (!connection) {
      head += this.#keepAlive
        ? `Connection: keep-alive\r\nKeep-Alive: timeout=${this.#link.keepAliveSeconds()}\r\n`
        : "Connection: close\r\n";
    }
    this.#pendingHead = head;
    this.#sent = true;
    return this;
  }

  flushHeaders(): void {
    if (!this.#sent) this.writeHead(200);
    if (this.#pendingHead === undefined || this.destroyed) return;
    this.#frameStream();
    const head = this.#pendingHead;
    this.#pendingHead = undefined;
    this.#link.socket.write(`${head}\r\n`, "latin1");
  }

  write(chunk: Buffer): boolean {
    if (this.#ended || this.destroyed) return false;
    if (!this.#sent) this.writeHead(200);
    if (this.#noBody || chunk.length === 0) return true;
    this.#frameStream();
    if (!this.#count(chunk.length)) return false;
    const data = this.#chunked ? frameChunk(chunk) : chunk;
    const ok = this.#send(data, undefined);
    if (!ok && !this.#waitingDrain) {
      this.#waitingDrain = true;
      this.#link.socket.once("drain", this.#onDrain);
    }
    return ok;
  }

  end(chunk?: Buffer | string): this {
    if (this.#ended) return this;
    if (!this.#sent) this.writeHead(200);
    this.#ended = true;
    if (this.destroyed) return this;
    let body = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    if (this.#noBody) body = undefined;
    if (!this.#framed) {
      // The whole body is here: its length is declared rather than sent chunked.
      this.#pendingHead += `Content-Length: ${body?.length ?? 0}\r\n`;
      this.#framed = true;
      this.#declared = body?.length ?? 0;
    }
    if (body !== undefined && body.length > 0 && !this.#count(body.length)) return this;
    if (this.#declared !== undefined && this.#written < this.#declared) {
      // Fewer bytes than the head declared: the client would wait for the rest for ever.
      this.destroy();
      return this;
    }
    let data: Buffer;
    if (this.#chunked) {
      const last = `${LAST_CHUNK}${this.#trailers}\r\n`;
      const framed = body === undefined || body.length === 0 ? undefined : frameChunk(body);
      data =
        framed === undefined
          ? Buffer.from(last, "latin1")
          : Buffer.concat([framed, Buffer.from(last, "latin1")]);
    } else data = body ?? Buffer.alloc(0);
    this.#send(data, this.#onWritten);
    return this;
  }

  addTrailers(headers: OutgoingHttpHeaders | IncomingHttpHeaders): void {
    for (const name in headers) {
      const value = headers[name];
      if (value !== undefined) this.#trailers += fieldLines(name, value, "trailer");
    }
  }

  destroy(_err?: Error): this {
    // Once the answer is out the connection is no longer its own (the next request's, or node's).
    if (this.#destroyed || this.#finished || this.#closed) return this;
    this.#destroyed = true;
    this.#link.socket.destroy();
    return this;
  }

  /** The connection closed: 'close' for a response that had not finished. */
  connectionClosed(): void {
    this.#destroyed = true;
    this.#link.socket.off("drain", this.#onDrain);
    this.#emitClose();
  }

  /** A body that streams without a declared length goes chunked. */
  #frameStream(): void {
    if (this.#framed) return;
    this.#framed = true;
    this.#chunked = true;
    this.#pendingHead += "Transfer-Encoding: chunked\r\n";
  }

  /** Counts body bytes against the declared length; more than it declared cuts the connection. */
  #count(n: number): boolean {
    this.#written += n;
    if (this.#declared === undefined || this.#written <= this.#declared) return true;
    // The bytes past the length would reach the client as the start of another answer.
    this.destroy();
    return false;
  }

  /** Writes `data`, with the head in front of it while the head is still held. */
  #send(data: Buffer, done: ((err?: Error | null) => void) | undefined): boolean {
    const socket = this.#link.socket;
    const head = this.#pendingHead;
    if (head === undefined) return socket.write(data, done);
    this.#pendingHead = undefined;
    if (data.length > COALESCE_BYTES) {
      socket.cork();
      socket.write(`${head}\r\n`, "latin1");
      const ok = socket.write(data, done);
      socket.uncork();
      return ok;
    }
    const out = Buffer.allocUnsafe(head.length + 2 + data.length);
    out.write(head, 0, "latin1");
    out[head.length] = 0x0d;
    out[head.length + 1] = 0x0a;
    out.set(data, head.length + 2);
    return socket.write(out, done);
  }

  #onDrain = (): void => {
    this.#waitingDrain = false;
    if (!this.#closed) this.emit("drain");
  };

  #onWritten = (err?: Error | null): void => {
    if (err) return;
    this.#finished = true;
    this.#link.socket.off("drain", this.#onDrain);
    this.emit("finish");
    this.#link.finished(this, !this.#keepAlive);
    this.#emitClose();
  };

  #emitClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#destroyed = true;
    this.emit("close");
  }
}
