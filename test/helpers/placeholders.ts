// Placeholders computed in the test's process, by the function `keybroker env` prints them
// with (agentView): from a broker's runtime, or from the rule file, the home's key and the
// broker's environment when the broker is a child. No `keybroker env` spawn per fixture.

import { agentView } from "../../admin/agent-view.js";
import { homeKey } from "../../core/home.js";
import { Runtime } from "../../proxy/runtime.js";
import { loadRules } from "../../rules/load.js";
import { createSecretResolver } from "../../secrets/sources.js";

/** Variable name → placeholder, for `client`; throws for a client the rules do not define. */
export function agentPlaceholders(rt: Runtime, client = "default"): Record<string, string> {
  const view = agentView(rt, client);
  if (view === undefined) throw new Error(`no client ${client} in the rules`);
  return { ...view.placeholders };
}

/** The same for a broker of `home` run on `config` with `env` (its working folder: the home). */
export async function localPlaceholders(
  config: string,
  home: string,
  env: NodeJS.ProcessEnv,
  client = "default",
): Promise<Record<string, string>> {
  const rules = loadRules(config);
  const resolver = createSecretResolver(rules, { env, home, cwd: home, warn: () => {} });
  return agentPlaceholders(await Runtime.build(rules, resolver, homeKey(home)), client);
}

/** The placeholder variable of each built-in provider the fixtures use. */
export const PLACEHOLDER_VARIABLES: Readonly<Record<string, string>> = {
  openai: "OPENAI_API_KEY",
  anthropic: "ANTHROPIC_API_KEY",
  gemini: "GEMINI_API_KEY",
  github: "GITHUB_TOKEN",
};

/** `provider`'s placeholder in `vars`, or an error naming the variables there are. */
export function placeholderOf(vars: Record<string, string>, provider: string): string {
  const value = vars[PLACEHOLDER_VARIABLES[provider] ?? ""];
  if (value === undefined)
    throw new Error(`no placeholder for ${provider} in ${JSON.stringify(Object.keys(vars))}`);
  return value;
}
