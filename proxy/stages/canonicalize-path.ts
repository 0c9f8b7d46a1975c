// docs/spec.md §3.9, decisions 101-102: toward a provider with policy rules, the request path is put in
// its one canonical form before anything looks at it, and that form (with the query as sent) is
// what policy and approvals match and what goes upstream. A path with no such form is refused
// with 400. Toward providers without policy rules the path goes out as the client sent it.
import { BrokerError } from "../../core/errors.js";
import { canonicalPath } from "../../rules/canonical-path.js";
import type { ProviderRule } from "../../rules/types.js";
import type { Exchange } from "../exchange.js";

/** Paths are shown in messages up to this length. */
const SHOWN = 200;

/**
 * `target` (path and query) as it goes to `provider`: the canonical path and the query as
 * sent when the provider has policy rules, `target` itself otherwise. Throws 400 bad_request
 * for a path with no canonical form.
 */
export function policyTarget(provider: ProviderRule, target: string): string {
  if (provider.policy.length === 0) return target;
  const q = target.indexOf("?");
  const path = q === -1 ? target : target.slice(0, q);
  const canonical = canonicalPath(path);
  if ("path" in canonical) return q === -1 ? canonical.path : canonical.path + target.slice(q);
  const shown = JSON.stringify(path.length > SHOWN ? `${path.slice(0, SHOWN)}…` : path);
  throw new BrokerError(
    "bad_request",
    `the path ${shown} has ${canonical.problem}; ${provider.id} has policy rules, so keybroker sends it only paths that every server reads the same way`,
    { provider: provider.id, hint: canonical.fix },
  );
}

/** On a host several providers share, checkPlaceholders calls this once it picks the provider. */
export function canonicalizePath(x: Exchange): void {
  if (x.provider !== undefined) x.path = policyTarget(x.provider.rule, x.path);
}
