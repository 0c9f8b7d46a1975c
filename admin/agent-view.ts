// What an agent gets from a rule set for one client (docs/spec.md §10): the providers it has a
// placeholder for, those placeholders, and the names of the variables that hold real secrets.
// The running broker answers it from its admin API; `env` and `run` build the same from the
// rule file when no broker runs, so the set is the same either way.
import { parseRef } from "../rules/credential-ref.js";
import { secretVariableNames } from "../rules/secret-variables.js";
import type { RulesInForce } from "./rules-in-force.js";

export interface AgentView {
  readonly client: string;
  /** The client's token reference (e.g. `KB_CRON_TOKEN`), resolved by the caller, never here. */
  readonly token: string | undefined;
  /** The rules it comes from: their origin and the digest of the file's text. */
  readonly rules: { readonly origin: string; readonly digest: string | undefined };
  /** Providers the client gets a placeholder for, in rule order. */
  readonly providers: readonly string[];
  /** Variable name → placeholder. */
  readonly placeholders: Readonly<Record<string, string>>;
  /** Variables these rules read a real secret from: `run` removes them. */
  readonly secretVariables: readonly string[];
  /** What `run` tells the user of each provider (decision 143); absent from an older broker. */
  readonly details?: readonly ProviderDetail[];
}

export interface ProviderDetail {
  readonly id: string;
  /** The variables that hold its placeholder. */
  readonly variables: readonly string[];
  /** False when the rules name it but no credential of it resolved (503 credential_unavailable). */
  readonly credential: boolean;
  /** The environment variables its key is read from. */
  readonly keyVariables: readonly string[];
}

/**
 * Active for an agent: every provider the rule file names, even while its credential cannot be
 * resolved (the agent then gets 503 `credential_unavailable`, not a missing key), and every
 * catalogue provider whose credential resolves. It is exactly the set the broker intercepts.
 */
export function agentProviders(rt: RulesInForce): string[] {
  return [...rt.providers.values()].filter((p) => p.intercepted).map((p) => p.rule.id);
}

/** The view for `client`, or undefined when the rules do not define that client. */
export function agentView(rt: RulesInForce, client: string): AgentView | undefined {
  const state = rt.clients.get(client);
  if (state === undefined) return undefined;
  const providers = agentProviders(rt).filter((id) => rt.clientAllows(state, id));
  const placeholders: Record<string, string> = {};
  const details: ProviderDetail[] = [];
  for (const id of providers) {
    const { rule, active } = rt.providers.get(id)!;
    const value = rt.placeholders.get(client, id)!;
    for (const name of rule.placeholder.env) placeholders[name] = value;
    const keyVariables = [...rule.credentials, ...rule.credentialAliases]
      .map(parseRef)
      .filter((r) => r.source === undefined || r.source === "env")
      .map((r) => r.key);
    details.push({ id, variables: rule.placeholder.env, credential: active, keyVariables });
  }
  return {
    client,
    token: state.rule.token,
    rules: { origin: rt.rules.origin, digest: rt.rules.digest },
    providers,
    placeholders,
    secretVariables: [...secretVariableNames(rt.rules)],
    details,
  };
}
