import { writeTrustBundle } from "../../certs/bundle.js";
import { loadOrCreateCa } from "../../certs/ca.js";
import { brokerAgentView, buildAgentVariables, localAgentView } from "../agent-setup.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { brokerPort, createContext, findRunningBroker, localRuntime } from "../context.js";
import { envWarnings } from "../env-warnings.js";
import { notOnPortError } from "../port-probe.js";
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
  help: `Usage: keybroker env [--client NAME] [--format sh|dotenv|json] [--port N] [--config FILE] [--home DIR]

Prints HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY, the CA bundle variables
(SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS, GIT_SSL_CAINFO,
DENO_CERT, AWS_CA_BUNDLE, PIP_CERT, HTTPLIB2_CA_CERTS, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH,
NIX_SSL_CERT_FILE, CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE; SSL_CERT_DIR, a folder of the same
certificates under OpenSSL's hashed names), NODE_USE_ENV_PROXY=1 and a placeholder for each
active provider. It needs no real
secret: placeholders derive from the home's key, so it runs in the agent's own shell.
Providers: every provider the rule file names (even while its credential cannot be resolved),
and every catalogue provider whose credential resolves. With a broker running, its rules
decide (it reports them), wherever this runs; a rule file found here that differs from the
broker's is named in a warning. With no broker, the rule file here decides.

  --client NAME    the client (default: default)
  --use PROVIDER   where an API key and a subscription login serve one host (anthropic and
                   claude-oauth on api.anthropic.com), export only PROVIDER's variable
  --format F       sh (default: export lines for eval), dotenv, or json
  --port N         the broker on this port, when several run for the home
  --node-preload   also set NODE_OPTIONS (the current one plus --import of keybroker's Node
                   preload and --disable-warning=UNDICI-EHPA), as \`keybroker run\` does: fetch and
                   http/https then go through the broker on Node 20 too. Off by default: the
                   path is of this machine, wrong in a container or on another host.

Example: eval "$(keybroker env)"

${COMMON_HELP}`,
  async run(argv) {
    const { values } = parse(argv, {
      client: { type: "string" },
      format: { type: "string" },
      port: { type: "string" },
      "node-preload": { type: "boolean" },
      use: { type: "string" },
    });
    const format = values.format ?? "sh";
    formatVariables({}, format);
    const port = brokerPort(values.port);
    const ctx = createContext(values);
    const { path, rules } = readRules(ctx, values.config);
    const client = values.client ?? "default";
    const preload = { nodePreload: values["node-preload"] === true, use: values.use };
    const running = await findRunningBroker(ctx.home, port);
    let vars: Record<string, string>;
    let url = running?.url;
    let homeCa: string | undefined;
    if (running !== undefined) {
      const view = await brokerAgentView(ctx, running, client, path);
      vars = await buildAgentVariables(ctx, rules, view, running, preload);
    } else {
      if (port !== undefined) throw await notOnPortError(ctx.home, port);
      const ca = loadOrCreateCa(ctx.home);
      homeCa = ca.fingerprint256;
      const view = localAgentView(await localRuntime(ctx, rules), client);
      url = `http://${rules.listen.host.includes(":") ? `[${rules.listen.host}]` : rules.listen.host}:${rules.listen.port}`;
      vars = await buildAgentVariables(
        ctx,
        rules,
        view,
        { url, bundle: writeTrustBundle(ca, ctx.home) },
        preload,
      );
    }
    ctx.out(formatVariables(vars, format));
    for (const w of await envWarnings({ url: url!, running: running !== undefined, homeCa, ...preload })) {
      ctx.err(`keybroker env: warning: ${w}`);
    }
    return 0;
  },
};
