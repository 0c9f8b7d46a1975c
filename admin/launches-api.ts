// The admin API's launches (decision 114), used by `keybroker run --isolate`; only an owner
// (the home's admin token) gets here, callers.ts refuses everyone else:
//   GET    launches          → { launches: [...] }
//   POST   launches          { client, command } → { id, client, command, startedAt, token, user }
//   DELETE launches/<id>     → { launch }
import type { IncomingMessage } from "node:http";
import { BrokerError } from "../core/errors.js";
import { LAUNCH_USER_PREFIX, type LaunchInfo } from "../core/launch-info.js";
import type { AdminHost } from "./host.js";

const ROUTE = /^launches(?:\/([0-9a-f]{1,32}))?$/;

export async function handleLaunches(
  broker: AdminHost,
  req: IncomingMessage,
  route: string,
  body: () => Promise<Record<string, unknown>>,
): Promise<unknown> {
  const m = ROUTE.exec(route);
  if (m !== null && m[1] === undefined && req.method === "GET") return { launches: broker.launches.list() };
  if (m !== null && m[1] === undefined && req.method === "POST") {
    const { client, command } = await body();
    if (typeof client !== "string" || !broker.runtime.clients.has(client)) {
      throw new BrokerError(
        "bad_request",
        `no such client ${JSON.stringify(client)} in the running broker's rules`,
        {
          hint: `known: ${[...broker.runtime.clients.keys()].join(", ")}`,
        },
      );
    }
    if (typeof command !== "string" || command === "") {
      throw new BrokerError("bad_request", '"command" must be the launched command line');
    }
    return startLaunch(broker, client, command);
  }
  if (m !== null && m[1] !== undefined && req.method === "DELETE") {
    const launch = endLaunch(broker, m[1]);
    if (launch === undefined) throw new BrokerError("bad_request", `no launch ${m[1]} is running`);
    return { launch };
  }
  throw new BrokerError("bad_request", `unknown admin request ${req.method} ${req.url}`);
}

/** What `run --isolate` gets for a new launch: the proxy user and token its agent uses. */
export type StartedLaunch = LaunchInfo & { readonly token: string; readonly user: string };

/** Mints a launch and audits it (also used by `run`'s own broker, without the API). */
export function startLaunch(
  broker: Pick<AdminHost, "launches" | "audit">,
  client: string,
  command: string,
): StartedLaunch {
  const launch = broker.launches.mint(client, command);
  broker.audit({
    decision: "launch_started",
    client,
    launch: launch.id,
    reason: `${launch.command} (started ${launch.startedAt})`,
  });
  return { ...launch, user: `${LAUNCH_USER_PREFIX}${launch.id}` };
}

/** Revokes a launch's token and audits its end; undefined when no such launch runs. */
export function endLaunch(broker: Pick<AdminHost, "launches" | "audit">, id: string): LaunchInfo | undefined {
  const launch = broker.launches.revoke(id);
  if (launch === undefined) return undefined;
  broker.audit({
    decision: "launch_ended",
    client: launch.client,
    launch: launch.id,
    reason: `${launch.command} (started ${launch.startedAt})`,
  });
  return launch;
}
