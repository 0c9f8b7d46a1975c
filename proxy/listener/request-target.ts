// Where a request is bound, worked out from how it reached the broker, and what a request line
// may name. Inside an intercepted connection the target is the tunnel's origin: an absolute-form
// URL must name that same origin (else a client could aim a request carrying the credential at
// another host's path), and nothing is rewritten silently. On the listener itself a path is a
// reverse mount (`/p/<provider>/...`), an absolute `http:` URL a plain-HTTP proxy request.
import type { IncomingMessage } from "node:http";
import { BrokerError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import { normalizeHost } from "../../rules/host-pattern.js";
import type { Mode } from "../exchange.js";
import type { Launches } from "../launches.js";
import type { ClientState, ProviderState, Runtime } from "../runtime.js";
import { authenticate } from "./client-auth.js";
import { connectInfo } from "./engine.js";

/** Where a request is bound, and for whom: what the pipeline's exchange starts from. */
export interface Target {
  readonly mode: Mode;
  readonly client: ClientState;
  readonly host: string;
  readonly port: number;
  readonly scheme: "https" | "http";
  readonly path: string;
  readonly sni: string | undefined;
  readonly provider?: ProviderState;
  readonly reverseRest?: string;
}

/** What the target is worked out from: an HTTP/1.1 request, or an HTTP/2 stream's head. */
export type TargetRequest = Pick<IncomingMessage, "socket" | "url" | "headers" | "httpVersion">;

/** HTTP/1.1 requires Host (RFC 9112 §3.2); node's own check answers a bare 400, so it is off. */
export function assertHostHeader(req: TargetRequest): void {
  if (req.httpVersion === "1.1" && req.headers.host === undefined) {
    throw new BrokerError("bad_request", "the request has no Host header", {
      hint: "an HTTP/1.1 request must name its host in a Host header",
    });
  }
}

/** The path and query of an intercepted request bound for `host:port`. */
export function interceptedPath(url: string, host: string, port: number): string {
  if (url.startsWith("/")) return url;
  const refuse = (why: string) =>
    new BrokerError("bad_request", `the request target ${JSON.stringify(url.slice(0, 200))} ${why}`, {
      hint: `send the path alone (origin-form), or a URL of https://${host}${port === 443 ? "" : `:${port}`}`,
    });
  let target: URL;
  try {
    target = new URL(url);
  } catch {
    throw refuse("is neither a path nor a URL");
  }
  let targetHost: string;
  try {
    targetHost = normalizeHost(target.hostname);
  } catch {
    throw refuse("names an invalid host");
  }
  const targetPort = target.port === "" ? (target.protocol === "https:" ? 443 : 80) : Number(target.port);
  if (
    target.protocol !== "https:" ||
    target.username !== "" ||
    target.password !== "" ||
    targetHost !== host ||
    targetPort !== port
  ) {
    throw refuse("names another origin than this connection's");
  }
  return target.pathname + target.search;
}

/** Where an intercepted request goes: the host and port its CONNECT named. */
export function interceptedTarget(rt: Runtime, launches: Launches, req: TargetRequest): Target {
  const info = connectInfo(req.socket);
  const client =
    info === undefined
      ? undefined
      : info.launch === undefined
        ? rt.clients.get(info.client)
        : launches.state(rt, info.launch);
  if (info === undefined || client === undefined) {
    throw new BrokerError("client_unauthorized", "the client of this connection is no longer configured");
  }
  assertHostHeader(req);
  const sni = (req.socket as { servername?: string | false }).servername;
  return {
    mode: "intercept",
    client,
    host: info.host,
    port: info.port,
    scheme: "https",
    path: interceptedPath(req.url ?? "/", info.host, info.port),
    sni: sni || undefined,
  };
}

/** Where a request to the listener itself goes: a reverse mount, or a plain-HTTP proxy target. */
export function outerTarget(rt: Runtime, launches: Launches, req: TargetRequest, log: Logger): Target {
  assertHostHeader(req);
  const url = req.url ?? "/";
  if (url.startsWith("/")) {
    const mounted = rt.providerForMount(url.split("?")[0]!);
    if (mounted === undefined) {
      throw new BrokerError("bad_request", `no provider is mounted at ${url.split("?")[0]}`, {
        hint: "reverse mode paths look like /p/<provider>/<path>; see keybroker env",
      });
    }
    const client = authenticate(rt, launches, req.headers["proxy-authorization"], log);
    const upstream = new URL(mounted.provider.rule.upstream!);
    const after = url.slice(mounted.provider.rule.mount!.length);
    const rest = after.startsWith("/") ? after : "/" + after;
    // Only an MCP server on loopback may be plain http (rules/schema.ts).
    const http = upstream.protocol === "http:";
    return {
      mode: "reverse",
      client,
      host: normalizeHost(upstream.hostname),
      port: Number(upstream.port) || (http ? 80 : 443),
      scheme: http ? "http" : "https",
      path: upstream.pathname.replace(/\/$/, "") + rest,
      sni: undefined,
      provider: mounted.provider,
      reverseRest: rest,
    };
  }
  let target: URL;
  try {
    target = new URL(url);
  } catch {
    throw new BrokerError("bad_request", `not a valid request target: ${url.slice(0, 200)}`);
  }
  if (target.protocol !== "http:") {
    throw new BrokerError("bad_request", `${target.protocol} URLs must be sent through CONNECT`, {
      hint: "configure the proxy as HTTPS_PROXY so the client tunnels HTTPS",
    });
  }
  let host: string;
  try {
    host = normalizeHost(target.hostname);
  } catch {
    throw new BrokerError("bad_request", `not a valid request target: ${url.slice(0, 200)}`);
  }
  return {
    mode: "plain",
    client: authenticate(rt, launches, req.headers["proxy-authorization"], log),
    host,
    port: Number(target.port) || 80,
    scheme: "http",
    path: target.pathname + target.search,
    sni: undefined,
  };
}
