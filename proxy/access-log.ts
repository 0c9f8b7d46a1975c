// The access log: one log line per request for a person watching the broker, when
// KEYBROKER_ACCESS_LOG=1 or the rule file's `log: { access: true }` asks for it. The audit log
// stays the record; this is the same facts in the broker's own log, ids and fingerprints only.
import { stripQuery } from "../audit/audit-line.js";
import { UsageError } from "../core/errors.js";
import type { Logger } from "../core/log.js";
import type { Exchange } from "./exchange.js";
import type { ForwardResult } from "./forward.js";

/** KEYBROKER_ACCESS_LOG: 1/true/yes/on, 0/false/no/off or unset; anything else is a usage error. */
export function accessLogFromEnv(env: NodeJS.ProcessEnv): boolean {
  const value = (env.KEYBROKER_ACCESS_LOG ?? "").trim().toLowerCase();
  if (["1", "true", "yes", "on"].includes(value)) return true;
  if (["", "0", "false", "no", "off"].includes(value)) return false;
  throw new UsageError(`KEYBROKER_ACCESS_LOG=${JSON.stringify(env.KEYBROKER_ACCESS_LOG)} is not one of 1, 0`);
}

export function logAccess(
  log: Logger,
  x: Exchange,
  decision: string,
  status: number,
  code: string | undefined,
  result: ForwardResult | undefined,
): void {
  const query = x.provider?.rule.inject.query;
  const path = query === undefined ? x.path : stripQuery(x.path, [query]);
  const host = x.port === (x.scheme === "https" ? 443 : 80) ? x.host : `${x.host}:${x.port}`;
  const ms = Math.round((performance.now() - x.startedAt) * 10) / 10;
  log.info(
    {
      access: true,
      client: x.client.rule.name,
      provider: x.provider?.rule.id,
      credential: x.secret?.id,
      decision,
      code,
      bytesIn: result?.bytesIn,
      bytesOut: result?.bytesOut,
      ms,
    },
    `${x.method} ${host}${path} ${status}`,
  );
}
