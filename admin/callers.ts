// Who calls the admin API (docs/spec.md §16): the caller's bearer token decides. The home's admin token
// is the owner (the CLI); a client's own token gives that client's role. Owners may do
// everything; admins answer approvals, read the status and reset marks; user and guest tokens
// are refused with 403, unknown ones with 407.
import type { IncomingMessage } from "node:http";
import { hostname } from "node:os";
import { BrokerError } from "../core/errors.js";
import { sameToken } from "../core/same-token.js";
import type { Role } from "../rules/types.js";
import type { AdminHost } from "./host.js";

export interface Caller {
  readonly role: Role;
  /** How the audit log names who answered. */
  readonly by: string;
}

/** `route`: the admin API path after `/__keybroker/admin/`, without the query. */
export function isApprovalsRoute(route: string): boolean {
  return route === "approvals" || route.startsWith("approvals/");
}

/** Who a bearer token belongs to: the home's admin token (owner), or a client with a token. */
export function callerOf(broker: AdminHost, adminToken: string, req: IncomingMessage): Caller | undefined {
  const given = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
  return given === undefined ? undefined : callerOfToken(broker, adminToken, given);
}

/** Who a token belongs to (also the admin page's login form). */
export function callerOfToken(broker: AdminHost, adminToken: string, given: string): Caller | undefined {
  if (sameToken(given, adminToken)) return { role: "owner", by: "admin token" };
  for (const client of broker.runtime.clients.values()) {
    if (client.token !== undefined && sameToken(given, client.token.reveal()))
      return { role: client.rule.role, by: `client ${client.rule.name}` };
  }
  return undefined;
}

/**
 * How the holder's audit line names who answered a request: in a fleet the answer may come from
 * another broker, so the answering broker's host and address are named too.
 */
export function answeredBy(broker: AdminHost, by: string): string {
  if (broker.sharedState.health().store !== "redis") return by;
  return `${by} on ${hostname()} (${broker.address.url})`;
}

/** What a client with the role admin may do besides approvals (docs/spec.md §16: the page, resets). */
const ADMIN_ROLE_ROUTES = new Set(["status", "reset"]);

/** The caller of an admin request, refused (407 / 403) when its role does not allow `route`. */
export function authorizeAdmin(
  broker: AdminHost,
  adminToken: string,
  req: IncomingMessage,
  route: string,
): Caller {
  const caller = callerOf(broker, adminToken, req);
  if (caller === undefined) {
    throw new BrokerError(
      "client_unauthorized",
      "the admin API needs the home's admin token, or the token of an owner or admin client",
      { headers: { "www-authenticate": "Bearer" } },
    );
  }
  const allowed =
    caller.role === "owner" ||
    (caller.role === "admin" && (isApprovalsRoute(route) || ADMIN_ROLE_ROUTES.has(route)));
  if (!allowed) {
    throw new BrokerError(
      "policy_denied",
      `${caller.by} has the role ${caller.role}, which may not use ${route}`,
      {
        hint: "use the token of a client with the role owner (or admin, for approvals, status and resets)",
      },
    );
  }
  return caller;
}
