// Which provider a request is for: the one its host belongs to (reverse mode knows it from the
// mount already).
import type { Exchange } from "../exchange.js";

export function matchProvider(x: Exchange): void {
  if (x.mode === "reverse") return;
  const candidates = x.rt.providersForHost(x.host, x.port);
  // A shared host: checkPlaceholders picks the provider whose placeholder the request carries.
  if (candidates !== undefined && candidates.length > 1) x.sharedHost = candidates;
  else x.provider = candidates?.[0];
}
