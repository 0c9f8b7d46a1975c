// docs/spec.md §16: a `guest` client uses its providers with safe methods only (GET, HEAD, OPTIONS);
// anything else is refused with 403 policy_denied before a credential is chosen. A protocol
// upgrade (WebSocket) is a GET that opens a channel both ways, so it is not safe (docs/spec.md §3.10):
// a guest's request that asks for one is refused as well.
import { BrokerError } from "../../core/errors.js";
import type { Exchange } from "../exchange.js";

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

export function checkRole(x: Exchange): void {
  if (x.client.rule.role !== "guest" || x.provider === undefined) return;
  const method = x.method.toUpperCase();
  const upgrade = x.req.headers.upgrade;
  if (SAFE_METHODS.has(method) && upgrade === undefined) return;
  const name = x.client.rule.name;
  const what = upgrade === undefined ? method : `an upgrade to ${JSON.stringify(upgrade.slice(0, 40))}`;
  throw new BrokerError(
    "policy_denied",
    `client "${name}" is a guest: it may only read (GET, HEAD, OPTIONS), not ${what}`,
    {
      provider: x.provider.rule.id,
      hint: `give clients.${name} the role user to let it make changes or open WebSockets`,
    },
  );
}
