// The admin API's approvals (docs/spec.md §16), used by `keybroker approvals|approve|deny` and the admin
// page; callers.ts has already let an owner or admin through:
//   GET  approvals                 → { approvals: [...] }
//   POST approvals/<id>/approve    { for?: "10m" } → { approval }
//   POST approvals/<id>/deny       → { approval }
import type { IncomingMessage } from "node:http";
import { BrokerError } from "../core/errors.js";
import { parseDuration } from "../rules/units.js";
import { answeredBy, type Caller } from "./callers.js";
import type { AdminHost } from "./host.js";

const ROUTE = /^approvals(?:\/([^/]{1,64})\/(approve|deny))?$/;

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

/**
 * Answers one approvals request from a caller authorizeAdmin let through, with the JSON body to
 * send (200); refusals throw BrokerError.
 */
export async function handleApprovals(
  broker: AdminHost,
  caller: Caller,
  req: IncomingMessage,
  route: string,
  readBody: () => Promise<Record<string, unknown>>,
): Promise<unknown> {
  const match = ROUTE.exec(route);
  // A fleet broker cut off from Redis sees and answers only the requests it holds: say so.
  const degradedSince = broker.sharedState.health().degradedSince;
  if (match !== null && match[1] === undefined && req.method === "GET") {
    return {
      approvals: await broker.approvals.list(),
      ...(degradedSince === undefined ? {} : { degradedSince }),
    };
  }
  if (match !== null && match[1] !== undefined && req.method === "POST") {
    const id = match[1];
    const body = await readBody();
    const answered =
      match[2] === "approve"
        ? await broker.approvals.approve(id, answeredBy(broker, caller.by), forMs(body))
        : await broker.approvals.deny(id, answeredBy(broker, caller.by));
    if (answered === undefined) {
      throw new BrokerError(
        "not_found",
        degradedSince === undefined
          ? `no pending approval "${id}": it was answered, timed out or withdrawn`
          : `no pending approval "${id}" on this broker: the fleet's Redis has not answered since ${degradedSince}, so a request another broker holds cannot be answered from here until it does`,
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
