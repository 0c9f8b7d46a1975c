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
    const name = raw[i]!.toLowerCase();
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
