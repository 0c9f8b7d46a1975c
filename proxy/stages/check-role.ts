// SPEC §16: a `guest` client uses its providers with safe methods only (GET, HEAD, OPTIONS);
// anything else is refused with 403 policy_denied before a credential is chosen.
import { BrokerError } from "../../core/errors.js";
import type { Exchange } from "../exchange.js";

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

export function checkRole(x: Exchange): void {
  if (x.client.rule.role !== "guest" || x.provider === undefined) return;
  const method = (x.req.method ?? "GET").toUpperCase();
  if (SAFE_METHODS.has(method)) return;
  const name = x.client.rule.name;
  throw new BrokerError(
    "policy_denied",
    `client "${name}" is a guest: it may only read (GET, HEAD, OPTIONS), not ${method}`,
    {
      provider: x.provider.rule.id,
      hint: `give clients.${name} the role user to let it make changes`,
    },
  );
}
