// `host:port` addresses as the rule file writes them (listen, resolve), and the loopback test
// that decides whether a listener needs client tokens (docs/spec.md §3.5).
import { isIPv4, isIPv6 } from "node:net";
import { HostPatternError, normalizeHost } from "./host-pattern.js";

export interface HostPort {
  /** Normalized host: lower-case, punycode, IPv6 without brackets. */
  readonly host: string;
  readonly port: number;
}

/**
 * Parses `host:port` or `[v6]:port`. The port is required unless `defaultPort` is given; port 0
 * is accepted only with `allowPortZero` (a listener asking for any free port).
 */
export function parseHostPort(
  text: string,
  options: { defaultPort?: number; allowPortZero?: boolean } = {},
): HostPort {
  const fail = (why: string): never => {
    throw new HostPatternError(`${JSON.stringify(text)} is not a valid address (${why}) — write "host:port"`);
  };
  let hostText: string;
  let portText: string | undefined;
  const bracketed = /^(\[[^\]]*\])(?::(.*))?$/.exec(text);
  if (bracketed) {
    hostText = bracketed[1] ?? "";
    portText = bracketed[2];
  } else if (text.split(":").length > 2) {
    return fail('write an IPv6 address in brackets, as in "[::1]:8899"');
  } else {
    const colon = text.lastIndexOf(":");
    hostText = colon < 0 ? text : text.slice(0, colon);
    portText = colon < 0 ? undefined : text.slice(colon + 1);
  }
  let port: number;
  if (portText === undefined) {
    if (options.defaultPort === undefined) return fail("the port is missing");
    port = options.defaultPort;
  } else {
    if (!/^[0-9]{1,5}$/.test(portText)) return fail("the port is not a number");
    port = Number(portText);
    if (port > 65535 || (port === 0 && !options.allowPortZero)) return fail("the port is out of range");
  }
  let host: string;
  try {
    host = normalizeHost(hostText);
  } catch {
    return fail("the host is not valid");
  }
  return { host, port };
}

/** `host:port`, with an IPv6 host in brackets: the key form of `Rules.resolve`. */
export function hostPortKey(host: string, port: number): string {
  return `${host.includes(":") ? `[${host}]` : host}:${port}`;
}

/** True for `localhost`, 127.0.0.0/8, `::1` and IPv4-mapped loopback. Expects a normalized host. */
export function isLoopbackHost(host: string): boolean {
  if (host === "localhost") return true;
  if (isIPv4(host)) return host.startsWith("127.");
  if (isIPv6(host)) {
    if (host === "::1") return true;
    const mapped = /^::ffff:(.+)$/.exec(host)?.[1];
    if (mapped === undefined) return false;
    if (isIPv4(mapped)) return mapped.startsWith("127.");
    // URL canonicalization writes mapped IPv4 as hex groups: ::ffff:7f00:1
    return /^7f[0-9a-f]{2}:/.test(mapped);
  }
  return false;
}
