// SPEC §3.1: the CONNECT target, the TLS SNI and the Host header must name the same host.
import { BrokerError } from "../../core/errors.js";
import { normalizeHost } from "../../rules/host-pattern.js";
import type { Exchange } from "../exchange.js";

export function parseHostHeader(
  value: string,
  defaultPort: number,
): { host: string; port: number } | undefined {
  const m = /^(\[[^\]]+\]|[^:]+)(?::(\d{1,5}))?$/.exec(value.trim());
  if (!m) return undefined;
  try {
    return { host: normalizeHost(m[1]!), port: m[2] === undefined ? defaultPort : Number(m[2]) };
  } catch {
    return undefined;
  }
}

export function checkHostBinding(x: Exchange): void {
  if (x.mode !== "intercept") return;
  const hostHeader = x.req.headers.host;
  const parsed = hostHeader === undefined ? undefined : parseHostHeader(hostHeader, 443);
  const sni = x.sni === undefined ? undefined : normalizeHostOrRaw(x.sni);
  const hostOk = parsed !== undefined && parsed.host === x.host && parsed.port === x.port;
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
}

function normalizeHostOrRaw(host: string): string {
  try {
    return normalizeHost(host);
  } catch {
    return host;
  }
}
