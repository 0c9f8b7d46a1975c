// Works out what an agent gets for a client: the broker to use, the placeholders of the active
// providers and the client's token, without printing or passing any real provider secret.
import { UserError } from "../core/errors.js";
import { homeKey } from "../core/home.js";
import type { Rules } from "../rules/types.js";
import { placeholderFor } from "../secrets/placeholders.js";
import { agentVariables } from "./agent-env.js";
import { type Context, localResolver } from "./context.js";

export async function clientToken(ctx: Context, rules: Rules, client: string): Promise<string | undefined> {
  const rule = rules.clients.find((c) => c.name === client);
  if (rule === undefined) {
    throw new UserError(`client "${client}" is not defined in the rule file: add it under clients:`);
  }
  if (rule.token === undefined) return undefined;
  const resolver = localResolver(ctx, rules);
  const resolution = await resolver.resolve(rule.token);
  if (resolution.secret === undefined) {
    throw new UserError(
      `the token of client "${client}" (${rule.token}) has no value here: set it, then retry`,
    );
  }
  return resolution.secret.reveal();
}

export function placeholderVariables(
  ctx: Context,
  rules: Rules,
  client: string,
  activeProviders: readonly string[],
): Record<string, string> {
  const key = homeKey(ctx.home);
  const rule = rules.clients.find((c) => c.name === client);
  const out: Record<string, string> = {};
  for (const provider of rules.providers) {
    if (!activeProviders.includes(provider.id)) continue;
    if (rule !== undefined && rule.providers !== "*" && !rule.providers.includes(provider.id)) continue;
    out[provider.placeholder.env] = placeholderFor(key, client, provider);
  }
  return out;
}

export async function buildAgentVariables(
  ctx: Context,
  rules: Rules,
  client: string,
  broker: { url: string; bundle: string; activeProviders: readonly string[] },
): Promise<Record<string, string>> {
  const token = await clientToken(ctx, rules, client);
  return agentVariables({
    url: broker.url,
    client,
    token,
    bundle: broker.bundle,
    placeholders: placeholderVariables(ctx, rules, client, broker.activeProviders),
  });
}
