// docs/spec.md §19 "Use": a phantom access token an agent holds for one of keybroker's logins stands
// for that login's current token, only toward its provider's hosts. Found by computation (the
// phantom carries its login and keybroker's signature, secrets/oauth/phantoms.ts): nothing is
// read per request. Toward any other host it is blocked as a placeholder is (docs/spec.md §3.2).
import { BrokerError } from "../../core/errors.js";
import { Phantoms } from "../../secrets/oauth/phantoms.js";
import type { Exchange } from "../exchange.js";

export function findPhantoms(x: Exchange): void {
  let found: ReturnType<Exchange["rt"]["phantoms"]["find"]> | undefined;
  if (Phantoms.mayHold(x.path)) found = x.rt.phantoms.find(x.path);
  const headers = x.headers;
  for (let i = 1; i < headers.length; i += 2) {
    const value = headers[i]!;
    if (Phantoms.mayHold(value)) found = [...(found ?? []), ...x.rt.phantoms.find(value)];
  }
  if (found === undefined) return;
  for (const { token, binding } of found) {
    if (x.provider === undefined && x.sharedHost !== undefined)
      x.provider = x.sharedHost.find((p) => p.rule.id === binding.provider);
    if (x.provider?.rule.id !== binding.provider || x.mode === "plain") {
      throw new BrokerError(
        "placeholder_host_mismatch",
        `a phantom token of provider "${binding.provider}" was bound for ${x.host}, which is not one of its hosts; the request was blocked and nothing was sent`,
        { provider: binding.provider, hint: `send ${binding.provider} requests only to its own hosts` },
      );
    }
    // Only an access token authenticates a request; a refresh or id token's phantom is inert here.
    if (binding.kind === "access" && x.phantom === undefined) x.phantom = { token, login: binding.id };
  }
}
