// Host names and host patterns: normalization, the strict pattern syntax of the rule file
// (exact host or `*.example.com`, optional `:port`), and matching. Not micromatch: its `*`
// crosses dots, and a credential's host binding must never be that loose.
import { isIPv6 } from "node:net";
import { domainToASCII } from "node:url";
import type { HostPattern } from "./types.js";

export const DEFAULT_PORT = 443;

const LABEL = /^[a-z0-9_-]{1,63}$/;
/** Already normalized: lower-case ASCII labels, last one starting with a letter (so not IPv4). */
const PLAIN_HOST = /^(?:[a-z0-9_-]{1,63}\.)*[a-z][a-z0-9-]{0,62}$/;
const GLOB_SYNTAX = /[!?{}[\],]/;
const FIX = 'use an exact host or "*.example.com"';

export class HostPatternError extends Error {
  override readonly name = "HostPatternError";
}

/**
 * The canonical form of a host name as it is compared: lower-case, no trailing dot, IDN as
 * punycode, IPv4 in dotted-decimal, IPv6 compressed and without brackets. Throws on an empty or
 * invalid name.
 */
export function normalizeHost(host: string): string {
  if (host === "") throw new HostPatternError("empty host name");
  if (host.startsWith("[")) {
    if (!host.endsWith("]")) throw new HostPatternError(`${show(host)} is not a valid host: missing "]"`);
    return canonicalIPv6(host.slice(1, -1), host);
  }
  if (host.includes(":")) {
    if (!isIPv6(host)) throw new HostPatternError(`${show(host)} is not a valid host name (no port here)`);
    return canonicalIPv6(host, host);
  }
  const name = host.endsWith(".") ? host.slice(0, -1) : host;
  if (PLAIN_HOST.test(name) && !name.includes("xn--") && name.length <= 253) return name;
  const ascii = name === "" ? "" : domainToASCII(name);
  if (ascii === "" || ascii.length > 253 || !ascii.split(".").every((label) => LABEL.test(label))) {
    throw new HostPatternError(`${show(host)} is not a valid host name`);
  }
  return ascii;
}

function canonicalIPv6(address: string, original: string): string {
  if (!isIPv6(address)) throw new HostPatternError(`${show(original)} is not a valid IPv6 address`);
  try {
    return new URL(`http://[${address}]/`).hostname.slice(1, -1);
  } catch {
    throw new HostPatternError(`${show(original)} is not a valid IPv6 address`);
  }
}

/**
 * Parses a rule-file host pattern: `host`, `host:port`, `*.example.com`, `*.example.com:8443`,
 * `[::1]:8443`. A wildcard stands for one or more whole labels in front of a suffix of at least
 * two labels. Anything looser is rejected with a message that says why and what to write.
 */
export function parseHostPattern(source: string): HostPattern {
  const reject = (why: string): never => {
    throw new HostPatternError(`${show(source)} is not a valid host pattern (${why}) — ${FIX}`);
  };
  if (source === "") reject("it is empty");
  if (/\s/.test(source)) reject("it contains whitespace");
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(source)) reject("write the host alone, without a scheme or path");
  if (source.includes("/")) reject("a host pattern has no path");

  let hostPart = source;
  let port = DEFAULT_PORT;
  const bracketed = /^\[([^\]]*)\](?::(.*))?$/.exec(source);
  if (bracketed) {
    if (!isIPv6(bracketed[1] ?? "")) reject("glob syntax (! ? , { } [ ]) is not allowed in hosts");
    hostPart = `[${bracketed[1] ?? ""}]`;
    if (bracketed[2] !== undefined) port = parsePort(bracketed[2], reject);
  } else if (source.split(":").length > 2) {
    if (!isIPv6(source)) reject('write an IPv6 address in brackets, as in "[::1]:443"');
  } else if (source.includes(":")) {
    const colon = source.lastIndexOf(":");
    hostPart = source.slice(0, colon);
    port = parsePort(source.slice(colon + 1), reject);
  }

  if (hostPart === "*")
    reject("a bare * would match every host; to intercept everything, set intercept: all");
  if (hostPart.includes("**")) reject("** is glob syntax, not a host pattern");
  if (!bracketed && GLOB_SYNTAX.test(hostPart)) reject("glob syntax (! ? , { } [ ]) is not allowed in hosts");

  const wildcard = hostPart.startsWith("*.");
  const name = wildcard ? hostPart.slice(2) : hostPart;
  if (name.includes("*")) reject('a wildcard must be the whole first label, as in "*.example.com"');
  if (!bracketed) {
    const labels = (name.endsWith(".") ? name.slice(0, -1) : name).split(".");
    if (labels.some((label) => label === "")) reject("it has an empty label");
  }

  let host = "";
  try {
    host = normalizeHost(wildcard ? name : hostPart);
  } catch {
    reject("not a valid host name");
  }
  if (wildcard) {
    if (host.includes(":") || /^[0-9.]+$/.test(host))
      reject("a wildcard cannot stand in front of an IP address");
    if (host.split(".").length < 2) reject('too broad: a wildcard needs at least two labels after "*."');
  }
  return { source, host, wildcard, port };
}

function parsePort(text: string, reject: (why: string) => never): number {
  if (!/^[0-9]{1,5}$/.test(text)) reject(`port ${show(text)} is not a number`);
  const port = Number(text);
  if (port < 1 || port > 65535) reject(`port ${port} is out of range 1-65535`);
  return port;
}

/**
 * True when `host:port` is covered by the pattern. `host` may come straight from a CONNECT
 * target, SNI or `Host` header (any case, trailing dot, IDN, IPv6 in brackets); an invalid host
 * never matches. `*.example.com` matches `a.example.com` and `a.b.example.com`, never
 * `example.com`.
 */
export function hostMatches(pattern: HostPattern, host: string, port: number): boolean {
  if (port !== pattern.port) return false;
  let name: string;
  try {
    name = normalizeHost(host);
  } catch {
    return false;
  }
  if (!pattern.wildcard) return name === pattern.host;
  return name.length > pattern.host.length + 1 && name.endsWith(`.${pattern.host}`);
}

/** The pattern as one comparable string: `*.example.com:443`. */
export function hostPatternKey(pattern: HostPattern): string {
  const host = pattern.host.includes(":") ? `[${pattern.host}]` : pattern.host;
  return `${pattern.wildcard ? "*." : ""}${host}:${pattern.port}`;
}

function show(text: string): string {
  return JSON.stringify(text.length > 80 ? `${text.slice(0, 80)}…` : text);
}
