// Works out what an agent gets for a client: the placeholders of the active providers (from the
// running broker's rules when one runs, else from the rule file here) and the client's token,
// without printing or passing any real provider secret.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type AgentView, agentView } from "../admin/agent-view.js";
import { UserError } from "../core/errors.js";
import type { Runtime } from "../proxy/runtime.js";
import { ruleTextDigest } from "../rules/digest.js";
import type { Rules } from "../rules/types.js";
import { adminRequest } from "./admin-client.js";
import { agentVariables } from "./agent-env.js";
import { type Context, localResolver, type RunningBroker } from "./context.js";

/** The agent's view from rules resolved in this process (no broker running, or run's own). */
export function localAgentView(rt: Runtime, client: string): AgentView {
  const view = agentView(rt, client);
  if (view === undefined) {
    const known = [...rt.clients.keys()].join(", ");
    throw new UserError(
      `no such client "${client}" (known: ${known}): add it under clients: in ${rt.rules.origin}`,
    );
  }
  return view;
}

/**
 * The agent's view from the running broker: its rules, whatever folder this runs in. Warns when
 * the rule file found here is not the one the broker runs.
 */
export async function brokerAgentView(
  ctx: Context,
  broker: RunningBroker,
  client: string,
  ruleFile: string | undefined,
): Promise<AgentView> {
  const view = await adminRequest<AgentView>(
    ctx.home,
    broker,
    "GET",
    `agent?client=${encodeURIComponent(client)}`,
  );
  if (ruleFile !== undefined && !sameRules(ruleFile, view.rules)) {
    ctx.err(
      `keybroker: warning: the rule file ${ruleFile} differs from the running broker's (${view.rules.origin}); using the broker's rules`,
    );
  }
  return view;
}

function sameRules(ruleFile: string, theirs: AgentView["rules"]): boolean {
  if (resolve(ruleFile) !== theirs.origin) return false;
  try {
    return ruleTextDigest(readFileSync(ruleFile, "utf8")) === theirs.digest;
  } catch {
    return false;
  }
}

export async function clientToken(ctx: Context, rules: Rules, view: AgentView): Promise<string | undefined> {
  if (view.token === undefined) return undefined;
  const resolution = await localResolver(ctx, rules).resolve(view.token);
  if (resolution.secret === undefined) {
    throw new UserError(
      `the token of client "${view.client}" (${view.token}) has no value here: set it, then retry`,
    );
  }
  return resolution.secret.reveal();
}

/** The module `run` preloads into Node agents (built beside this file in dist/cli/). */
export const NODE_PRELOAD = fileURLToPath(new URL("./node-preload.js", import.meta.url));

/** Proxy, CA bundle and placeholder variables for the view's client, toward `broker`. */
export async function buildAgentVariables(
  ctx: Context,
  rules: Rules,
  view: AgentView,
  broker: { url: string; bundle: string },
  opts: { nodePreload?: boolean } = {},
): Promise<Record<string, string>> {
  return agentVariables({
    url: broker.url,
    client: view.client,
    token: await clientToken(ctx, rules, view),
    bundle: broker.bundle,
    placeholders: view.placeholders,
    ...(opts.nodePreload === true ? { nodePreload: NODE_PRELOAD, nodeOptions: ctx.env.NODE_OPTIONS } : {}),
  });
}
