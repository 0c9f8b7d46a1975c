import { spawn } from "node:child_process";
import { constants } from "node:os";
import { createLogger } from "../../core/log.js";
import { tuneV8 } from "../../core/v8-tuning.js";
import { Broker } from "../../proxy/server.js";
import { secretVariableNames } from "../agent-env.js";
import { buildAgentVariables } from "../agent-setup.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { createContext, findRunningBroker, readRulesIsolated } from "../context.js";

export const run: Command = {
  name: "run",
  help: `Usage: keybroker run [--client NAME] [--config FILE] [--home DIR] -- COMMAND [ARGS...]

Runs COMMAND with the proxy variables, the CA bundle variables and a placeholder for each
active provider set, and with every variable that holds a real secret removed from its
environment. Uses the broker recorded in the home when it is running; otherwise starts one
for the command's lifetime on a free port. Exits with the command's exit code.

  --client NAME    the client to run as (default: default)

${COMMON_HELP}`,
  async run(argv) {
    const dash = argv.indexOf("--");
    const own = dash === -1 ? argv : argv.slice(0, dash);
    const command = dash === -1 ? [] : argv.slice(dash + 1);
    const { values } = parse(own, { client: { type: "string" } });
    if (command.length === 0) throw new UsageError("no command given: keybroker run -- COMMAND [ARGS...]");
    const ctx = createContext(values);
    // Checked in a worker: this process may serve as the broker for as long as the agent runs.
    const { rules } = await readRulesIsolated(ctx, values.config);
    const client = values.client ?? "default";

    let broker: Broker | undefined;
    let target = await findRunningBroker(ctx.home);
    if (target === undefined) {
      tuneV8();
      broker = await Broker.create({
        home: ctx.home,
        rules,
        log: createLogger(ctx.env.KEYBROKER_LOG_LEVEL ?? "warn"),
        port: 0,
      });
      const address = await broker.listen();
      const active = [...broker.runtime.providers.values()].filter((p) => p.active).map((p) => p.rule.id);
      target = {
        url: address.url,
        port: address.port,
        pid: process.pid,
        activeProviders: active,
        bundle: broker.bundlePath,
      };
    }
    const vars = await buildAgentVariables(ctx, rules, client, target);
    const env: NodeJS.ProcessEnv = { ...ctx.env };
    for (const name of secretVariableNames(rules)) delete env[name];
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
