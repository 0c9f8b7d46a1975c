// The listener's own endpoints (reverse mounts, admin, health) answer local programs only: a web
// page could otherwise make the user's browser spend their keys (a cross-site request, or DNS
// rebinding onto 127.0.0.1). Browsers name themselves in Origin / Sec-Fetch-Site and a rebound
// name in Host; agents and SDKs send neither.
import type { IncomingMessage } from "node:http";
import { BrokerError } from "../../core/errors.js";
import { isLoopbackHost } from "../../rules/address.js";
import { normalizeHost } from "../../rules/host-pattern.js";
import { parseHostHeader } from "../stages/check-host-binding.js";

/** Refuses a request that names another host than the listener's, or comes from a web page. */
export function assertLocalCaller(req: IncomingMessage, listen: string): void {
  const host = parseHostHeader(req.headers.host ?? "", 80);
  const local = (h: string) => isLoopbackHost(h) || h === listen;
  if (host === undefined || !local(host.host)) {
    throw new BrokerError("bad_request", `requests for "${req.headers.host ?? ""}" are not served here`, {
      hint: "address keybroker as 127.0.0.1 or localhost",
    });
  }
  const site = req.headers["sec-fetch-site"];
  const origin = req.headers.origin;
  let originHost: string | undefined;
  try {
    originHost =
      origin === undefined || origin === "null" ? undefined : normalizeHost(new URL(origin).hostname);
  } catch {
    originHost = "invalid";
  }
  if (
    site === "cross-site" ||
    site === "same-site" ||
    origin === "null" ||
    (originHost !== undefined && !local(originHost))
  ) {
    throw new BrokerError("bad_request", "requests from web pages are refused", {
      hint: "keybroker serves local programs; a browser page may not use it",
    });
  }
}
