// The wire side of upstream-h1.ts (decision 188): node's llhttp binding, checked once, and the
// request head keybroker writes itself, with the checks that keep a header from splitting it.
import { createRequire } from "node:module";
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
    const slots = [P.kOnHeaders, P.kOnHeadersComplete, P.kOnBody, P.kOnMessageComplete, P.RESPONSE];
    if (!slots.every((n) => typeof n === "number") || typeof P.kLenientNone !== "number") return undefined;
    if (typeof P.prototype.initialize !== "function" || typeof P.prototype.execute !== "function")
      return undefined;
    return P;
  } catch {
    return undefined;
  }
})();

/** Whether this node has the parser the client needs. */
export const H1_PARSER_AVAILABLE = HTTPParser !== undefined;

/** A header value that would end the line early (CR, LF) or is not text (NUL, controls). */
const BAD_VALUE = /[\0-\x08\x0a-\x1f\x7f]/;
const BAD_NAME = /[^!#$%&'*+\-.^_`|~0-9A-Za-z]/;
const EXPECTS_BODY = new Set(["POST", "PUT", "PATCH"]);

function invalid(message: string): Error {
  return Object.assign(new Error(message), { code: "UND_ERR_INVALID_ARG" });
}

/**
 * The request head, framing included: `content-length` is the body's own length when the body
 * is in memory, the client's for a stream that has one, else the stream goes chunked.
 */
export function requestHead(
  o: H2DispatchOptions,
  length: number | undefined,
): { head: string; chunked: boolean } {
  if (BAD_NAME.test(o.method)) throw invalid("the request method is not an HTTP token");
  if (BAD_VALUE.test(o.path) || o.path.includes(" "))
    throw invalid("the request path has characters HTTP/1.1 cannot carry");
  let head = `${o.method} ${o.path} HTTP/1.1\r\n`;
  let host = false;
  let declared: string | undefined;
  const list = o.headers;
  for (let i = 0; i < list.length; i += 2) {
    const name = list[i]!;
    const value = list[i + 1]!;
    if (BAD_NAME.test(name) || BAD_VALUE.test(value))
      throw invalid(`header ${JSON.stringify(name)} cannot be sent`);
    if (name === "content-length") {
      declared ??= value;
      continue;
    }
    if (name === "host") host = true;
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
    const name = lines[i]!.toLowerCase();
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
