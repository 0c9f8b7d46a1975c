// Header lists as flat `[name, value, name, value, ...]` arrays with lower-case names: the
// shape undici dispatches and Node's rawHeaders give, so nothing is re-parsed per request.
import type { IncomingHttpHeaders } from "node:http";

export type HeaderList = string[];

/** Header fields HTTP/2 forbids (RFC 9113 §8.2.2), besides `host` (`:authority` there). */
export const CONNECTION_SPECIFIC = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "upgrade",
  "http2-settings",
]);

/**
 * Hop-by-hop and proxy headers: never forwarded in either direction (RFC 9110 §7.6.1). A
 * `switch` rather than a Set: a name fresh from the wire would be hashed for the Set, while most
 * names fail the switch's tests on their length alone (decision 190).
 */
export function isHopByHop(name: string): boolean {
  switch (name) {
    case "connection":
    case "keep-alive":
    case "proxy-connection":
    case "proxy-authorization":
    case "proxy-authenticate":
    case "te":
    case "trailer":
    case "transfer-encoding":
    case "upgrade":
    case "expect":
    case "http2-settings":
      return true;
    default:
      return false;
  }
}

/**
 * Names requests and answers carry often, under their usual spellings, by length: each spelling
 * followed by its lower-case form, one string for the whole process. A name read off the wire is
 * a new string every time, and every property access, Set or Map lookup with it has V8 hash it
 * (and look it up in its table of names) first; the process's own copy is hashed once, and
 * compares with the names in the code by identity. Found by comparing it with the few spellings
 * of its length, which costs less than hashing it (decision 198).
 */
const COMMON_NAMES: string[][] = [];
for (const name of [
  "accept",
  "accept-encoding",
  "accept-language",
  "access-control-allow-origin",
  "age",
  "alt-svc",
  "anthropic-beta",
  "anthropic-version",
  "authorization",
  "cache-control",
  "cf-cache-status",
  "cf-ray",
  "connection",
  "content-encoding",
  "content-length",
  "content-type",
  "cookie",
  "date",
  "etag",
  "expires",
  "host",
  "idempotency-key",
  "keep-alive",
  "last-modified",
  "location",
  "openai-organization",
  "openai-processing-ms",
  "openai-project",
  "openai-version",
  "origin",
  "request-id",
  "retry-after",
  "server",
  "set-cookie",
  "strict-transport-security",
  "traceparent",
  "transfer-encoding",
  "user-agent",
  "vary",
  "via",
  "www-authenticate",
  "x-api-key",
  "x-content-type-options",
  "x-goog-api-client",
  "x-goog-api-key",
  "x-request-id",
  "x-stainless-arch",
  "x-stainless-lang",
  "x-stainless-os",
  "x-stainless-package-version",
  "x-stainless-retry-count",
  "x-stainless-runtime",
  "x-stainless-runtime-version",
  "x-stainless-timeout",
]) {
  const list = COMMON_NAMES[name.length] ?? [];
  COMMON_NAMES[name.length] = list;
  list.push(
    name,
    name,
    name.replace(/(^|-)[a-z]/g, (c) => c.toUpperCase()),
    name,
  );
}

/** `raw` in lower case: the process's own string for a common name. */
export function lowerName(raw: string): string {
  const list = COMMON_NAMES[raw.length];
  if (list !== undefined) for (let i = 0; i < list.length; i += 2) if (list[i] === raw) return list[i + 1]!;
  return raw.toLowerCase();
}

function connectionTokens(value: string | string[] | undefined): Set<string> | undefined {
  if (value === undefined) return undefined;
  // What HTTP/1.1 clients send on almost every request: nothing to strip besides the header.
  if (typeof value === "string" && /^\s*(?:keep-alive|close)\s*$/i.test(value)) return undefined;
  const tokens = (Array.isArray(value) ? value.join(",") : value)
    .split(",")
    .map((t) => t.trim().toLowerCase())
    .filter((t) => t !== "" && t !== "close" && t !== "keep-alive");
  return tokens.length === 0 ? undefined : new Set(tokens);
}

/** The request's headers minus hop-by-hop ones, names lower-cased. */
export function forwardableRequestHeaders(
  raw: readonly string[],
  connection: string | string[] | undefined,
): HeaderList {
  const named = connectionTokens(connection);
  const out: HeaderList = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = lowerName(raw[i]!);
    if (isHopByHop(name) || named?.has(name)) continue;
    out.push(name, raw[i + 1]!);
  }
  return out;
}

/** The response's headers minus hop-by-hop ones, for `res.writeHead`. */
export function forwardableResponseHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const named = connectionTokens(headers.connection);
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || isHopByHop(name) || named?.has(name)) continue;
    out[name] = value;
  }
  return out;
}

/**
 * Makes `list` hold what `from` holds, in place (stages keep the request's list; a retry starts
 * again from the plan's). Its length is set only when it differs: setting an array's length is
 * a call into V8's runtime, and a spread push a generic call (decision 198).
 */
export function replaceHeaders(list: HeaderList, from: readonly string[]): void {
  for (let i = 0; i < from.length; i++) list[i] = from[i]!;
  if (list.length !== from.length) list.length = from.length;
}

export function getHeader(list: HeaderList, name: string): string | undefined {
  for (let i = 0; i < list.length; i += 2) if (list[i] === name) return list[i + 1];
  return undefined;
}

export function removeHeader(list: HeaderList, name: string): void {
  for (let i = list.length - 2; i >= 0; i -= 2) if (list[i] === name) list.splice(i, 2);
}

export function setHeader(list: HeaderList, name: string, value: string): void {
  removeHeader(list, name);
  list.push(name, value);
}
