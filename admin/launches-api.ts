// The admin API's launches (decision 114), used by `keybroker run --isolate`; only an owner
// (the home's admin token) gets here, callers.ts refuses everyone else:
//   GET    launches          → { launches: [...] }
//   POST   launches          { client, command, pid?, start? } → { id, client, command, startedAt, token, user, hide }
//   DELETE launches/<id>     → { launch }
//   POST   launches/<id>/listen { token, pid } → { listening: "127.0.0.1:<port>" } (decision 139)
import type { IncomingMessage } from "node:http";
import { BrokerError } from "../core/errors.js";
import {
  LAUNCH_USER_PREFIX,
  type LaunchInfo,
  type LaunchOwner,
  RefusedListener,
} from "../core/launch-info.js";
import { secretFiles } from "../secrets/secret-files.js";
import type { AdminHost } from "./host.js";

const ROUTE = /^launches(?:\/([0-9a-f]{1,32})(\/listen)?)?$/;

export async function handleLaunches(
  broker: AdminHost,
  req: IncomingMessage,
  route: string,
  body: () => Promise<Record<string, unknown>>,
): Promise<unknown> {
  const m = ROUTE.exec(route);
  if (m !== null && m[1] === undefined && req.method === "GET") return { launches: broker.launches.list() };
  if (m !== null && m[1] === undefined && req.method === "POST") {
    const { client, command, pid, start } = await body();
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
    // The files this broker reads secrets from, from its own folder: run may start elsewhere.
    const hide = secretFiles(broker.runtime.rules, broker.home, process.cwd());
    if (
      pid !== undefined &&
      !(Number.isSafeInteger(pid) && (pid as number) > 0 && typeof start === "string")
    ) {
      throw new BrokerError(
        "bad_request",
        '"pid" must be the process id of the run that asks (a positive integer), with "start" its start time as /proc/<pid>/stat gives it',
      );
    }
    return {
      ...startLaunch(
        broker,
        client,
        command,
        pid === undefined ? undefined : { pid: pid as number, start: start as string },
      ),
      hide,
    };
  }
  if (m !== null && m[1] !== undefined && m[2] !== undefined && req.method === "POST") {
    const { token, pid } = await body();
    if (typeof token !== "string" || !(Number.isSafeInteger(pid) && (pid as number) > 0)) {
      throw new BrokerError(
        "bad_request",
        '"token" must be the launch\'s token and "pid" the process id of its jail (a positive integer)',
      );
    }
    try {
      const at = await broker.launches.listenInside(m[1], token, pid as number);
      return { listening: `${at.host}:${at.port}` };
    } catch (err) {
      if (!(err instanceof RefusedListener)) throw err;
      throw new BrokerError("bad_request", `the broker cannot listen inside launch ${m[1]}: ${err.message}`);
    }
  }
  if (m !== null && m[1] !== undefined && m[2] === undefined && req.method === "DELETE") {
    const launch = endLaunch(broker, m[1]);
    if (launch === undefined) throw new BrokerError("bad_request", `no launch ${m[1]} is running`);
    return { launch };
  }
  throw new BrokerError("bad_request", `unknown admin request ${req.method} ${req.url}`);
}

/** What `run --isolate` gets for a new launch: the proxy user and token its agent uses. */
export type StartedLaunch = LaunchInfo & {
  readonly token: string;
  readonly user: string;
  /** Over the admin API: the absolute paths of the files the broker reads secrets from (decision 136). */
  readonly hide?: readonly string[];
};

/** Mints a launch and audits it (also used by `run`'s own broker, without the API). */
export function startLaunch(
  broker: Pick<AdminHost, "launches" | "audit">,
  client: string,
  command: string,
  owner?: LaunchOwner,
): StartedLaunch {
  const launch = broker.launches.mint(client, command, owner);
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
  if (launch !== undefined) auditLaunchEnded(broker, launch);
  return launch;
}

/** The audit line of a launch's end; `why` when its `run` did not end it (decision 136). */
export function auditLaunchEnded(broker: Pick<AdminHost, "audit">, launch: LaunchInfo, why?: string): void {
  broker.audit({
    decision: "launch_ended",
    client: launch.client,
    launch: launch.id,
    reason: `${launch.command} (started ${launch.startedAt})${why === undefined ? "" : `: ${why}`}`,
  });
}
