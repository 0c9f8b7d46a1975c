// Works out what an agent gets for a client: the placeholders of the active providers (from the
// running broker's rules when one runs, else from the rule file here) and the client's token,
// without printing or passing any real provider secret.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { type AgentView, agentView } from "../admin/agent-view.js";
import { UserError } from "../core/errors.js";
import { builtFile } from "../core/package-root.js";
import type { Runtime } from "../proxy/runtime.js";
import { ruleTextDigest } from "../rules/digest.js";
import type { Rules } from "../rules/types.js";
import { adminRequest } from "./admin-client.js";
import { agentVariables } from "./agent-env.js";
import { type Context, localResolver, type RunningBroker } from "./context.js";
import { openTokenStore } from "./token-store.js";

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

/** The module `run` preloads into Node agents. */
export const NODE_PRELOAD = builtFile("cli/node-preload.js");

/** Proxy, CA bundle and placeholder variables for the view's client, toward `broker`. */
export async function buildAgentVariables(
  ctx: Context,
  rules: Rules,
  view: AgentView,
  broker: { url: string; bundle: string },
  opts: { nodePreload?: boolean; use?: string | undefined; note?: (line: string) => void } = {},
): Promise<Record<string, string>> {
  view = await chooseForSharedHosts(
    ctx,
    rules,
    view,
    opts.use,
    opts.note ?? ((l) => ctx.err(`keybroker: ${l}`)),
  );
  return agentVariables({
    url: broker.url,
    client: view.client,
    token: await clientToken(ctx, rules, view),
    bundle: broker.bundle,
    placeholders: view.placeholders,
    ...(opts.nodePreload === true ? { nodePreload: NODE_PRELOAD, nodeOptions: ctx.env.NODE_OPTIONS } : {}),
  });
}

/**
 * docs/spec.md §19: where a client has both an API key and a subscription login for one host, which
 * one the agent gets (decision 166). `use` names the provider to export; the other's variables
 * are left out. Without it, both are exported as before and a note says which an agent that
 * reads the key's variable ends up billed on, once the subscription has a login.
 */
/**
 * The API-key provider an agent prefers over each catalogue subscription when it finds the key's
 * variable (Codex's CODEX_API_KEY/OPENAI_API_KEY, Claude Code's ANTHROPIC_API_KEY).
 */
const SUBSCRIPTION_OF: Readonly<Record<string, string>> = {
  "codex-oauth": "openai",
  "claude-oauth": "anthropic",
  "gemini-oauth": "gemini",
};

export async function chooseForSharedHosts(
  ctx: Context,
  rules: Rules,
  view: AgentView,
  use: string | undefined,
  note: (line: string) => void,
): Promise<AgentView> {
  const rule = (id: string) => rules.providers.find((p) => p.id === id);
  if (use !== undefined && !view.providers.includes(use)) {
    throw new UserError(
      `--use ${use}: the client gets no provider "${use}" (it has: ${view.providers.join(", ")})`,
    );
  }
  const hostsOf = (id: string) => new Set((rule(id)?.hosts ?? []).map((h) => `${h.host}:${h.port}`));
  const drop = new Set<string>();
  let withLogins: Set<string> | undefined;
  for (const login of view.providers.filter((id) => rule(id)?.kind === "oauth_login")) {
    for (const key of view.providers.filter((id) => rule(id)?.kind === "key_pool")) {
      const shared = [...hostsOf(login)].filter((h) => hostsOf(key).has(h));
      // Or the same agent's two ways in on different hosts (Codex: api.openai.com, chatgpt.com).
      if (shared.length === 0 && SUBSCRIPTION_OF[login] !== key) continue;
      const host = (shared[0] ?? [...hostsOf(login)][0] ?? login).replace(/:443$/, "");
      if (use === login || use === key) {
        const other = use === login ? key : login;
        drop.add(other);
        note(
          `${host}: exporting ${use}'s variable${use === login ? " (the subscription)" : " (the API key)"}, not ${other}'s (--use ${use})`,
        );
        continue;
      }
      if (withLogins === undefined) {
        const { store, close } = await openTokenStore(ctx, rules);
        try {
          withLogins = new Set((await store.list()).map((l) => l.provider));
        } finally {
          await close();
        }
      }
      if (!withLogins.has(login)) continue;
      const vars = rule(key)!.placeholder.env.join(", ");
      note(
        `${host}: both ${key} (an API key, billed per request) and ${login} (a subscription login) serve this agent; ${vars} is exported, and an agent that finds it uses the API key — keybroker run --use ${login} exports only the subscription's`,
      );
    }
  }
  if (drop.size === 0) return view;
  const dropped = new Set([...drop].flatMap((id) => rule(id)?.placeholder.env ?? []));
  return {
    ...view,
    providers: view.providers.filter((id) => !drop.has(id)),
    placeholders: Object.fromEntries(
      Object.entries(view.placeholders).filter(([name]) => !dropped.has(name)),
    ),
  };
}
