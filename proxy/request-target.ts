// What a request line may name. Inside an intercepted connection the target is the tunnel's
// origin: an absolute-form URL must name that same origin (else a client could aim a request
// carrying the credential at another host's path), and nothing is rewritten silently.
import type { IncomingMessage } from "node:http";
import { BrokerError } from "../core/errors.js";
import { normalizeHost } from "../rules/host-pattern.js";

/** HTTP/1.1 requires Host (RFC 9112 §3.2); node's own check answers a bare 400, so it is off. */
export function assertHostHeader(req: IncomingMessage): void {
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
