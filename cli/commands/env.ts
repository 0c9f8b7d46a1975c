import { writeTrustBundle } from "../../certs/bundle.js";
import { loadOrCreateCa } from "../../certs/ca.js";
import { buildAgentVariables } from "../agent-setup.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { createContext, findRunningBroker, localRuntime } from "../context.js";
import { readRules } from "../read-rules.js";

function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

export function formatVariables(vars: Record<string, string>, format: string): string {
  switch (format) {
    case "sh":
      return Object.entries(vars)
        .map(([k, v]) => `export ${k}=${shellQuote(v)}`)
        .join("\n");
    case "dotenv":
      return Object.entries(vars)
        .map(([k, v]) => `${k}=${/^[\w@%+=:,./-]*$/.test(v) ? v : JSON.stringify(v)}`)
        .join("\n");
    case "json":
      return JSON.stringify(vars, null, 2);
    default:
      throw new UsageError(`--format: expected sh, dotenv or json, got "${format}"`);
  }
}

export const env: Command = {
  name: "env",
  help: `Usage: keybroker env [--client NAME] [--format sh|dotenv|json] [--config FILE] [--home DIR]

Prints HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY, the CA bundle variables
(SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS, GIT_SSL_CAINFO,
DENO_CERT), NODE_USE_ENV_PROXY=1 and a placeholder for each active provider. It needs no real
secret: placeholders derive from the home's key, so it runs in the agent's own shell.
Providers are those the running broker reports active; with no broker running, those whose
credentials resolve here, plus every provider the rule file names.

  --client NAME    the client (default: default)
  --format F       sh (default: export lines for eval), dotenv, or json

Example: eval "$(keybroker env)"

${COMMON_HELP}`,
  async run(argv) {
    const { values } = parse(argv, { client: { type: "string" }, format: { type: "string" } });
    const format = values.format ?? "sh";
    formatVariables({}, format);
    const ctx = createContext(values);
    const { rules } = readRules(ctx, values.config);
    const client = values.client ?? "default";
    let target = await findRunningBroker(ctx.home);
    if (target === undefined) {
      const ca = loadOrCreateCa(ctx.home);
      const rt = await localRuntime(ctx, rules);
      const active = [...rt.providers.values()].filter((p) => p.intercepted).map((p) => p.rule.id);
      const url = `http://${rules.listen.host.includes(":") ? `[${rules.listen.host}]` : rules.listen.host}:${rules.listen.port}`;
      target = {
        url,
        port: rules.listen.port,
        pid: 0,
        activeProviders: active,
        bundle: writeTrustBundle(ca, ctx.home),
      };
    }
    ctx.out(formatVariables(await buildAgentVariables(ctx, rules, client, target), format));
    return 0;
  },
};
