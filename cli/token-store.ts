// The token store a command writes logins to (and the MCP store their bindings to): the home's,
// or the fleet's Redis when the rule file says `state: redis://…` (docs/spec.md §17), so `auth add` on
// any machine serves every broker.
import { homeKey } from "../core/home.js";
import type { Rules } from "../rules/types.js";
import type { McpStore } from "../state/mcp/store.js";
import { openSharedState, type SharedStateOptions } from "../state/shared-state.js";
import type { TokenStore } from "../state/tokens/store.js";
import { type Context, localResolver } from "./context.js";

export async function openTokenStore(
  ctx: Context,
  rules: Rules,
): Promise<{ readonly store: TokenStore; readonly mcp: McpStore; close(): Promise<void> }> {
  const shared = await openSharedState(rules, sharedStateOptions(ctx, rules));
  return { store: shared.tokens, mcp: shared.mcp, close: () => shared.close() };
}

/** How a command reaches the shared state: the home's key, secrets resolved here, warnings on stderr. */
export function sharedStateOptions(ctx: Context, rules: Rules): SharedStateOptions {
  const resolver = localResolver(ctx, rules);
  return {
    home: ctx.home,
    homeKey: () => homeKey(ctx.home),
    resolve: async (ref) => (await resolver.resolve(ref)).secret?.reveal(),
    log: { warn: (m) => ctx.err(`warning: ${m}`), info: () => {} },
  };
}
