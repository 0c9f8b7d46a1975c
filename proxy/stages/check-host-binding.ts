// docs/spec.md §3.1: the CONNECT target, the TLS SNI and the Host header must name the same host.
import { BrokerError } from "../../core/errors.js";
import { normalizeHost } from "../../rules/host-pattern.js";
import type { Exchange } from "../exchange.js";
import { setHeader } from "../headers.js";

export function parseHostHeader(
  value: string,
  defaultPort: number,
): { host: string; port: number } | undefined {
  const m = /^(\[[^\]]+\]|[^:]+)(?::(\d{1,5}))?$/.exec(value.trim());
  if (!m) return undefined;
  const port = m[2] === undefined ? defaultPort : Number(m[2]);
  if (port < 1 || port > 65535) return undefined;
  try {
    return { host: normalizeHost(m[1]!), port };
  } catch {
    return undefined;
  }
}

let lastHost = "";
let lastPort = 0;
let lastSent = "";

/**
 * `host:port`, made once for a run of requests to the same origin, and flat: a string put
 * together with `+` is compared by V8 through its runtime, a joined one in place.
 */
function hostAndPort(host: string, port: number): string {
  if (host !== lastHost || port !== lastPort) {
    lastHost = host;
    lastPort = port;
    lastSent = [host, port].join(":");
  }
  return lastSent;
}

export function checkHostBinding(x: Exchange): void {
  if (x.mode !== "intercept") return;
  const hostHeader = x.req.headers.host;
  // x.headers has every request header but the hop-by-hop ones, names already lower-cased.
  let hosts = 0;
  for (let i = 0; i < x.headers.length; i += 2) if (x.headers[i] === "host") hosts++;
  // Upstream, the name is written one way only (undici takes the TLS server name from it).
  const sent = x.port === 443 ? x.host : hostAndPort(x.host, x.port);
  // What clients send on nearly every request: the Host header spelled as it goes upstream, no
  // SNI or the same name. Nothing to parse or rewrite then. (An IPv6 host is written in brackets
  // and takes the long way.)
  if (
    hosts === 1 &&
    hostHeader === sent &&
    (x.sni === undefined || x.sni === x.host) &&
    !x.host.includes(":")
  )
    return;
  const parsed = hostHeader === undefined ? undefined : parseHostHeader(hostHeader, 443);
  const sni = x.sni === undefined ? undefined : normalizeHostOrRaw(x.sni);
  const hostOk = hosts === 1 && parsed !== undefined && parsed.host === x.host && parsed.port === x.port;
  const sniOk = sni === undefined || sni === x.host;
  if (!hostOk || !sniOk) {
    throw new BrokerError(
      "host_mismatch",
      `the CONNECT target ${x.host}:${x.port}, the TLS server name ${sni ?? "(none)"} and the Host header ${
        hostHeader ?? "(none)"
      } do not agree; nothing was sent upstream`,
      { hint: "send the request to the host the connection was opened for" },
    );
  }
  setHeader(x.headers, "host", sent);
}

function normalizeHostOrRaw(host: string): string {
  try {
    return normalizeHost(host);
  } catch {
    return host;
  }
}
