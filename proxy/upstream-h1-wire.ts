// The wire side of upstream-h1.ts and upstream-h1-conn.ts (decision 188): node's llhttp
// binding, checked once, and the request head keybroker writes itself, with the checks that keep
// a header from splitting it.
import { createRequire } from "node:module";
import { Socket } from "node:net";
import { lowerName } from "./headers.js";
import type { H2DispatchOptions } from "./upstream-h2.js";

export type IncomingHeaders = Record<string, string | string[]>;

/** node's llhttp binding, as node:http's client uses it (`_http_common`: the same on Node 20, 22, 24). */
export interface Parser {
  initialize(type: number, resource: object, maxHeaderSize: number, lenient: number): void;
  execute(chunk: Buffer): number | Error;
  finish(): number | Error | undefined;
  close(): void;
  [slot: number]: unknown;
}
interface ParserClass {
  new (): Parser;
  readonly prototype: Parser;
  readonly RESPONSE: number;
  readonly REQUEST: number;
  readonly kOnMessageBegin: number;
  readonly kOnHeaders: number;
  readonly kOnHeadersComplete: number;
  readonly kOnBody: number;
  readonly kOnMessageComplete: number;
  readonly kLenientNone: number;
}
/**
 * node's parser, when it is there in the shape this client was written for: undocumented, it
 * could change in a node release, and the router then keeps undici for HTTP/1.1.
 */
export const HTTPParser: ParserClass | undefined = (() => {
  try {
    const P = (createRequire(import.meta.url)("_http_common") as { HTTPParser?: ParserClass }).HTTPParser;
    if (typeof P !== "function") return undefined;
    const slots = [
      P.kOnMessageBegin,
      P.kOnHeaders,
      P.kOnHeadersComplete,
      P.kOnBody,
      P.kOnMessageComplete,
      P.RESPONSE,
      P.REQUEST,
    ];
    if (!slots.every((n) => typeof n === "number") || typeof P.kLenientNone !== "number") return undefined;
    if (typeof P.prototype.initialize !== "function" || typeof P.prototype.execute !== "function")
      return undefined;
    return P;
  } catch {
    return undefined;
  }
})();

/**
 * The request methods by the number the parser gives them (node's own table, the HTTP methods
 * in llhttp's order); a number past its end is a method node names only in its full table.
 */
export const REQUEST_METHODS: readonly string[] | undefined = (() => {
  try {
    const m = (createRequire(import.meta.url)("_http_common") as { methods?: unknown }).methods;
    return Array.isArray(m) && m[1] === "GET" && m[3] === "POST" && m[5] === "CONNECT" ? m : undefined;
  } catch {
    return undefined;
  }
})();

const HEAD_END = Buffer.from("\r\n\r\n", "latin1");

/**
 * Where the head that starts `bytes` ends (after its blank line), or -1 when it does not end in
 * them: after the first CR LF CR LF. llhttp, strict, refuses a line ended without its CR, and a
 * head's line cannot be empty, so no head ends before it; blank lines before a message (which
 * llhttp skips) end no head, and the parse then goes on whole (decision 204). node's search
 * (memchr for the CR, then a compare) beat a loop over every fourth byte and a memchr call for
 * each LF from JavaScript on heads of 18 fields, and was within 20 ns of them on heads of four.
 */
export function headEnd(bytes: Buffer): number {
  const at = bytes.indexOf(HEAD_END, 0);
  return at === -1 ? -1 : at + HEAD_END.length;
}

/** Whether this node has the parser the client needs. */
export const H1_PARSER_AVAILABLE = HTTPParser !== undefined;

/**
 * Turns off the read-ahead turn node's Readable takes after each chunk a socket pushes
 * (`maybeReadMore`, one `process.nextTick` a read). It is for streams read on demand; a socket's
 * handle reads whenever bytes arrive, stops when its buffer is full and starts again when it is
 * read below the mark, so the turn only ever finds the socket already reading. On Node 22 and 24
 * a tick costs about 5,000 instructions (the tick object gets a private-symbol field V8 adds
 * through its runtime), two a plain request through the broker (decision 201). Node's own
 * IncomingMessage turns the same flag on for the same reason. Only sockets: a stream that makes
 * its data when asked (a Duplex of JavaScript's) needs the turn to be asked again, and is left as
 * it is, as is a socket without the internal state (some other node).
 */
export function withoutReadAhead(stream: NodeJS.ReadableStream): void {
  if (!(stream instanceof Socket)) return;
  const state = (stream as { _readableState?: { readingMore?: boolean } })._readableState;
  if (state !== undefined && typeof state.readingMore === "boolean") state.readingMore = true;
}

/**
 * What a header value may hold (undici's and node's rule): tab, visible ASCII and latin1 above
 * 0x7f. Anything else is refused, not only CR and LF: the head is written as latin1, which keeps
 * the low byte of a character above U+00FF, so U+010D U+010A would go out as CR LF.
 */
const BAD_VALUE = /[^\t\x20-\x7e\x80-\xff]/;
/** What a request target may hold: no space, no control character, nothing above U+00FF. */
const BAD_TARGET = /[^\x21-\x7e\x80-\xff]/;
const BAD_NAME = /[^!#$%&'*+\-.^_`|~0-9A-Za-z]/;
/** Fields the client's framing and connection are made of: keybroker writes its own. */
const FRAMING = new Set(["transfer-encoding", "connection", "keep-alive", "upgrade", "expect"]);
const EXPECTS_BODY = new Set(["POST", "PUT", "PATCH"]);

function invalid(message: string): Error {
  return Object.assign(new Error(message), { code: "UND_ERR_INVALID_ARG" });
}

/**
 * The request head, framing included: `content-length` is the body's own length when the body
 * is in memory, the client's for a stream that has one, else the stream goes chunked. A header
 * list that would frame the request otherwise (a second `host` or `content-length`, a length
 * that is not a number, `transfer-encoding` and the other connection fields) is refused, as
 * undici refused it.
 */
export function requestHead(
  o: H2DispatchOptions,
  length: number | undefined,
): { head: string; chunked: boolean } {
  if (o.method === "" || BAD_NAME.test(o.method)) throw invalid("the request method is not an HTTP token");
  if (o.path === "" || BAD_TARGET.test(o.path))
    throw invalid("the request path has characters HTTP/1.1 cannot carry");
  let head = `${o.method} ${o.path} HTTP/1.1\r\n`;
  let host = false;
  let declared: string | undefined;
  const list = o.headers;
  for (let i = 0; i < list.length; i += 2) {
    const name = list[i]!;
    const value = list[i + 1]!;
    if (name === "" || BAD_NAME.test(name) || BAD_VALUE.test(value))
      throw invalid(`header ${JSON.stringify(name)} cannot be sent`);
    if (name === "content-length") {
      if (declared !== undefined || !/^\d{1,15}$/.test(value))
        throw invalid("content-length is not one number");
      declared = value;
      continue;
    }
    if (name === "host") {
      if (host) throw invalid("the request has two host fields");
      host = true;
    } else if (FRAMING.has(name)) throw invalid(`header ${JSON.stringify(name)} is the connection's own`);
    head += `${name}: ${value}\r\n`;
  }
  if (!host) head += `host: ${new URL(o.origin).host}\r\n`;
  let chunked = false;
  if (length !== undefined) head += `content-length: ${length}\r\n`;
  else if (o.body !== null && declared !== undefined) head += `content-length: ${declared}\r\n`;
  else if (o.body !== null) {
    head += "transfer-encoding: chunked\r\n";
    chunked = true;
  } else if (declared !== undefined || EXPECTS_BODY.has(o.method)) head += "content-length: 0\r\n";
  return { head: `${head}\r\n`, chunked };
}

/** Response header lines as undici hands them over: lower-case names, repeats as arrays. */
export function headerObject(lines: readonly string[]): IncomingHeaders {
  const out: IncomingHeaders = {};
  for (let i = 0; i < lines.length; i += 2) {
    const raw = lines[i]!;
    const name = lowerName(raw);
    const value = lines[i + 1]!;
    const prior = out[name];
    if (prior === undefined) out[name] = value;
    else if (Array.isArray(prior)) prior.push(value);
    else out[name] = [prior, value];
  }
  return out;
}

export function getDeclared(list: readonly string[]): string | undefined {
  for (let i = 0; i < list.length; i += 2) if (list[i] === "content-length") return list[i + 1];
  return undefined;
}
