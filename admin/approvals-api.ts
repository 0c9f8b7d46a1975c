// The admin API's approvals (SPEC §16), used by `keybroker approvals|approve|deny` and the admin
// page:
//   GET  approvals                 → { approvals: [...] }
//   POST approvals/<id>/approve    { for?: "10m" } → { approval }
//   POST approvals/<id>/deny       → { approval }
// The caller's role decides: the home's admin token is the owner; a client token whose client is
// an owner or admin may list and answer; a user or guest token is refused with 403.
import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { BrokerError } from "../core/errors.js";
import type { Role } from "../rules/types.js";
import { parseDuration } from "../rules/units.js";
import type { AdminHost } from "./host.js";

const ROUTE = /^approvals(?:\/([^/]{1,64})\/(approve|deny))?$/;

export interface Caller {
  readonly role: Role;
  /** How the audit log names who answered. */
  readonly by: string;
}

/** `route`: the admin API path after `/__keybroker/admin/`, without the query. */
export function isApprovalsRoute(route: string): boolean {
  return route === "approvals" || route.startsWith("approvals/");
}

function sameToken(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Who a bearer token belongs to: the home's admin token (owner), or a client with a token. */
export function callerOf(broker: AdminHost, adminToken: string, req: IncomingMessage): Caller | undefined {
  const given = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
  if (given === undefined) return undefined;
  if (sameToken(given, adminToken)) return { role: "owner", by: "admin token" };
  for (const client of broker.runtime.clients.values()) {
    if (client.token !== undefined && sameToken(given, client.token.reveal()))
      return { role: client.rule.role, by: `client ${client.rule.name}` };
  }
  return undefined;
}

/** `{ for: "10m" }` → milliseconds; absent → undefined. */
function forMs(body: Record<string, unknown>): number | undefined {
  const value = body.for;
  if (value === undefined) return undefined;
  const ms = typeof value === "string" || typeof value === "number" ? parseDuration(value) : undefined;
  if (ms === undefined || ms <= 0) {
    throw new BrokerError(
      "bad_request",
      `"for" must be a duration such as "10m", got ${JSON.stringify(value)}`,
    );
  }
  return ms;
}

/** Answers one approvals request with the JSON body to send (200); refusals throw BrokerError. */
export async function handleApprovals(
  broker: AdminHost,
  adminToken: string,
  req: IncomingMessage,
  route: string,
  readBody: () => Promise<Record<string, unknown>>,
): Promise<unknown> {
  const caller = callerOf(broker, adminToken, req);
  if (caller === undefined) {
    throw new BrokerError(
      "client_unauthorized",
      "approvals need the home's admin token or the token of an owner or admin client",
      { headers: { "www-authenticate": "Bearer" } },
    );
  }
  if (caller.role !== "owner" && caller.role !== "admin") {
    throw new BrokerError(
      "policy_denied",
      `${caller.by} has the role ${caller.role}, which may not answer approvals`,
      {
        hint: "use an owner or admin client's token, or the home's admin token (keybroker approvals on the broker's machine)",
      },
    );
  }
  const match = ROUTE.exec(route);
  if (match !== null && match[1] === undefined && req.method === "GET") {
    return { approvals: await broker.approvals.list() };
  }
  if (match !== null && match[1] !== undefined && req.method === "POST") {
    const id = match[1];
    const body = await readBody();
    const answered =
      match[2] === "approve"
        ? await broker.approvals.approve(id, caller.by, forMs(body))
        : await broker.approvals.deny(id, caller.by);
    if (answered === undefined) {
      throw new BrokerError(
        "not_found",
        `no pending approval "${id}": it was answered, timed out or withdrawn`,
        {
          hint: "keybroker approvals lists the pending ones",
        },
      );
    }
    return { approval: answered };
  }
  throw new BrokerError("bad_request", `unknown approvals request ${req.method} ${req.url}`, {
    hint: "GET approvals, POST approvals/<id>/approve or POST approvals/<id>/deny",
  });
}
