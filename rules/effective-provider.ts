// What a provider entry amounts to once its defaults apply: its kind, the hosts it binds, its
// upstream and mount, its placeholder variables. One function for the cross-checks and for the
// compiler, both on entries the schema accepted.
import { chooseKind, kindOf, type ProviderKindName } from "./kinds/index.js";
import { effectiveMount, effectivePlaceholderEnv, mcpBinding } from "./provider-defaults.js";
import type { ProviderInput } from "./schema/index.js";

export interface EffectiveProvider {
  readonly kind: ProviderKindName;
  /** What `mcp:` binds (docs/spec.md §15): its URL's host and origin; unset without a valid URL. */
  readonly mcp?: { readonly host: string; readonly upstream: string };
  /** The hosts as written, or the MCP server's; unset when the entry lists none. */
  readonly hosts?: readonly string[];
  /** The upstream as written, or the MCP server's origin. */
  readonly upstream?: string;
  /** The reverse endpoint: the mount written (without a trailing slash), else `/p/<id>` with an upstream. */
  readonly mount?: string;
  /** The placeholder variables, the main one first (decision 122). */
  readonly env: readonly string[];
}

/** `entry` is the file's entry over its catalogue entry, as the schema parsed it. */
export function effectiveProvider(
  id: string,
  entry: ProviderInput,
  catalogueEntry?: ProviderInput,
): EffectiveProvider {
  const mcp = mcpBinding(entry.mcp);
  const kind = chooseKind(entry);
  const hosts = mcp !== undefined ? [mcp.host] : entry.hosts;
  const upstream = entry.upstream ?? mcp?.upstream;
  const mount = effectiveMount(id, entry.mount, upstream);
  const env = effectivePlaceholderEnv(
    id,
    entry.placeholder?.env,
    catalogueEntry,
    kindOf({ kind }).derivedEnv,
  );
  return {
    kind,
    ...(mcp === undefined ? {} : { mcp }),
    ...(hosts === undefined ? {} : { hosts }),
    ...(upstream === undefined ? {} : { upstream }),
    ...(mount === undefined ? {} : { mount }),
    env,
  };
}
