import { spawn } from "node:child_process";
import { constants } from "node:os";
import type { AgentView } from "../../admin/agent-view.js";
import { UserError } from "../../core/errors.js";
import { createLogger } from "../../core/log.js";
import { tuneV8 } from "../../core/v8-tuning.js";
import { Broker } from "../../proxy/server.js";
import { secretVariableNames } from "../../rules/secret-variables.js";
import { brokerAgentView, buildAgentVariables, localAgentView } from "../agent-setup.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { brokerPort, createContext, findRunningBroker, localRuntime, readRulesIsolated } from "../context.js";
import { hideSecretsFromEnviron } from "../hide-environ.js";
import { resolvedSecrets, stripSecrets } from "../strip-secrets.js";

export const run: Command = {
  name: "run",
  help: `Usage: keybroker run [--client NAME] [--port N] [--config FILE] [--home DIR] -- COMMAND [ARGS...]

Runs COMMAND with the proxy variables, the CA bundle variables and a placeholder for each
active provider set (as keybroker env prints them). Every variable a real secret is read from
is removed from its environment, and so is any other variable whose value contains a real
secret keybroker resolved (plain, base64, URL-encoded or JSON-escaped, whatever its name):
those are named on stderr. Uses the broker running for the home, and its rules, when there is
one; otherwise starts one for the command's lifetime on a free port. Exits with the command's
exit code.

  --client NAME    the client to run as (default: default)
  --port N         the broker on this port, when several run for the home
  --no-node-preload
                   leave NODE_OPTIONS alone: by default it gets --import of keybroker's Node
                   preload, which routes fetch and http/https through the broker on Node versions
                   that ignore HTTPS_PROXY (Node 20), and --disable-warning=UNDICI-EHPA

${COMMON_HELP}`,
  async run(argv) {
    const dash = argv.indexOf("--");
    const own = dash === -1 ? argv : argv.slice(0, dash);
    const command = dash === -1 ? [] : argv.slice(dash + 1);
    if (dash === -1) hintDashes(argv);
    const { values } = parse(own, {
      client: { type: "string" },
      port: { type: "string" },
      "no-node-preload": { type: "boolean" },
    });
    if (command.length === 0) throw new UsageError("no command given: keybroker run -- COMMAND [ARGS...]");
    const port = brokerPort(values.port);
    const ctx = createContext(values);
    // Checked in a worker: this process may serve as the broker for as long as the agent runs.
    const { path, rules } = await readRulesIsolated(ctx, values.config);
    const client = values.client ?? "default";
    const preload = { nodePreload: values["no-node-preload"] !== true };

    let broker: Broker | undefined;
    let vars: Record<string, string>;
    let view: AgentView;
    let secrets: string[];
    const running = await findRunningBroker(ctx.home, port);
    if (running !== undefined) {
      view = await brokerAgentView(ctx, running, client, path);
      vars = await buildAgentVariables(ctx, rules, view, running, preload);
      // What this environment would give the broker: resolved here, to be kept from the command.
      secrets = resolvedSecrets(await localRuntime(ctx, rules));
    } else {
      if (port !== undefined) throw new UserError(`no keybroker of this home runs on port ${port}`);
      tuneV8();
      broker = await Broker.create({
        home: ctx.home,
        rules,
        log: createLogger(ctx.env.KEYBROKER_LOG_LEVEL ?? "warn"),
        port: 0,
      });
      try {
        const address = await broker.listen();
        view = localAgentView(broker.runtime, client);
        vars = await buildAgentVariables(
          ctx,
          rules,
          view,
          { url: address.url, bundle: broker.bundlePath },
          preload,
        );
      } catch (err) {
        // An unknown client or a token with no value: the broker must not keep this process up.
        await broker.close();
        throw err;
      }
      secrets = resolvedSecrets(broker.runtime);
    }
    // The command could read this process's /proc/<pid>/environ: nothing to find there (decision 119).
    const exposed = hideSecretsFromEnviron(rules, secrets);
    if (exposed !== undefined) ctx.err(`keybroker run: warning: ${exposed}`);
    const env: NodeJS.ProcessEnv = { ...ctx.env };
    const copies = stripSecrets(env, [...view.secretVariables, ...secretVariableNames(rules)], secrets);
    if (copies.length > 0) {
      ctx.err(
        `keybroker run: removed from the command's environment, as they hold a real secret: ${copies.join(", ")}`,
      );
    }
    Object.assign(env, vars);

    const child = spawn(command[0]!, command.slice(1), { stdio: "inherit", env });
    const forward = (signal: NodeJS.Signals) => () => child.kill(signal);
    const handlers = (["SIGINT", "SIGTERM", "SIGHUP"] as const).map((s) => [s, forward(s)] as const);
    for (const [s, h] of handlers) process.on(s, h);
    const code = await new Promise<number>((resolve) => {
      child.once("error", (err) => {
        ctx.err(
          `keybroker run: cannot start ${command[0]}: ${(err as NodeJS.ErrnoException).code ?? err.message}`,
        );
        resolve(127);
      });
      child.once("exit", (status, signal) => {
        resolve(status ?? 128 + (signal ? (constants.signals[signal] ?? 1) : 1));
      });
    });
    for (const [s, h] of handlers) process.off(s, h);
    await broker?.close();
    return code;
  },
};

/** `keybroker run ls -la`: the command needs `--` before it, say so rather than "unknown option -l". */
function hintDashes(argv: readonly string[]): void {
  const takesValue = new Set(["--client", "--home", "--config", "--port"]);
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (takesValue.has(arg)) i++;
    else if (!arg.startsWith("-")) {
      throw new UsageError(
        `put -- before the command to run: keybroker run ${[...argv.slice(0, i), "--", ...argv.slice(i)].join(" ")}`,
      );
    }
  }
}
