import { spawn } from "node:child_process";
import { constants } from "node:os";
import type { AgentView } from "../../admin/agent-view.js";
import { endLaunch, type StartedLaunch, startLaunch } from "../../admin/launches-api.js";
import { createLogger } from "../../core/log.js";
import { tuneV8 } from "../../core/v8-tuning.js";
import { processStart } from "../../proxy/process-start.js";
import type { Broker } from "../../proxy/server.js";
import { secretVariableNames } from "../../rules/secret-variables.js";
import { adminRequest } from "../admin-client.js";
import { agentVariables } from "../agent-env.js";
import {
  brokerAgentView,
  buildAgentVariables,
  chooseForSharedHosts,
  localAgentView,
  NODE_PRELOAD,
} from "../agent-setup.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import {
  brokerPort,
  type Context,
  createContext,
  findRunningBroker,
  localRuntime,
  type RunningBroker,
  readRulesIsolated,
} from "../context.js";
import { hideSecretsFromEnviron } from "../hide-environ.js";
import { hiddenPaths } from "../isolate/hidden-paths.js";
import { commandLine, type LaunchDir, makeLaunchDir, runIsolated } from "../isolate/launch.js";
import { assertIsolationAvailable, parseAllowConnect } from "../isolate/plan.js";
import { notOnPortError } from "../port-probe.js";
import { runReport } from "../run-report.js";
import { resolvedSecrets, stripSecrets } from "../strip-secrets.js";

export const run: Command = {
  name: "run",
  help: `Usage: keybroker run [--client NAME] [--port N] [--quiet] [--isolate [--allow-connect HOST:PORT]...]
                     [--config FILE] [--home DIR] -- COMMAND [ARGS...]

Runs COMMAND with the proxy variables, the CA bundle variables and a placeholder for each
active provider set (as keybroker env prints them), and names on stderr, a line per provider,
the variables that hold its placeholder; it warns of a provider the broker has no credential
for and of a key variable it removed that no placeholder replaces. Every variable a real secret
is read from is removed from its environment, and so is any other variable whose value
contains a real secret keybroker resolved (plain, base64, URL-encoded or JSON-escaped,
whatever its name): those are named on stderr. Uses the broker running for the home, and its rules, when there is
one; otherwise starts one for the command's lifetime on a free port. Exits with the command's
exit code. No KEYBROKER_* variable reaches the command.

Without --isolate, the command runs as your user: it can read what you can (the broker's home
and its admin token, .env files, other processes' environments) and connect around the proxy.
run says so on stderr, unless --no-isolate or the rule file's run: { isolate: false } says you
know.

  --isolate        (Linux) run COMMAND in its own user, mount, PID and network namespaces: its
                   only way out is the broker (relayed to the address the proxy variables name),
                   the broker's home, the rule file and the files secrets are read from are
                   hidden, /tmp, /var/tmp, /dev/shm and /run/user/<uid> are its own (unix
                   sockets of servers outside are not reachable there, nor those in /run; one
                   in your project or home folder is), no process outside is visible, and it
                   gets its own client identity
                   (a launch, named in the audit log and status) for as long as it runs. The
                   rule file's run: { isolate: true } makes this the default.
  --allow-connect HOST:PORT
                   with --isolate: let COMMAND reach HOST:PORT (git over SSH, a database) through
                   the broker's CONNECT tunnel, audited. Inside, HOST resolves to a loopback
                   address that relays to it, so "git clone git@github.com:o/r" works unchanged
                   with --allow-connect github.com:22. Repeatable.
  --no-isolate     run without isolation, and without the notice that says so
  --quiet          leave out the lines that name each provider's placeholder variables (and
                   the broker run started); warnings stay
  --client NAME    the client to run as (default: default)
  --use PROVIDER   where an API key and a subscription login serve one host (anthropic and
                   claude-oauth on api.anthropic.com), give the command only PROVIDER's
                   variable; without it, run says which one it exports
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
      quiet: { type: "boolean" },
      isolate: { type: "boolean" },
      "no-isolate": { type: "boolean" },
      "allow-connect": { type: "string", multiple: true },
      use: { type: "string" },
    });
    if (command.length === 0) throw new UsageError("no command given: keybroker run -- COMMAND [ARGS...]");
    if (values.isolate === true && values["no-isolate"] === true)
      throw new UsageError("--isolate and --no-isolate contradict each other: pick one");
    const allow = parseAllowConnect(values["allow-connect"] ?? []);
    const port = brokerPort(values.port);
    const ctx = createContext(values);
    // Checked in a worker: this process may serve as the broker for as long as the agent runs.
    const { path, rules } = await readRulesIsolated(ctx, values.config);
    const isolate = values.isolate === true || (values["no-isolate"] !== true && rules.runIsolate === true);
    if (allow.length > 0 && !isolate)
      throw new UsageError("--allow-connect only applies to an isolated command: add --isolate");
    if (isolate) assertIsolationAvailable();
    else if (values["no-isolate"] !== true && rules.runIsolate !== false) ctx.err(NOT_ISOLATED);
    const client = values.client ?? "default";
    const preload = { nodePreload: values["no-node-preload"] !== true, use: values.use };

    let broker: Broker | undefined;
    let view: AgentView;
    let secrets: string[];
    let target: { url: string; bundle: string };
    const running: RunningBroker | undefined = await findRunningBroker(ctx.home, port);
    if (running !== undefined) {
      view = await brokerAgentView(ctx, running, client, path);
      target = running;
      // What this environment would give the broker: resolved here, to be kept from the command.
      secrets = resolvedSecrets(await localRuntime(ctx, rules));
    } else {
      if (port !== undefined) throw await notOnPortError(ctx.home, port);
      tuneV8();
      // Loaded only here: the broker's modules are half of what `run` costs to start, and most
      // runs use a broker that is already running.
      const { Broker } = await import("../../proxy/server.js");
      broker = await Broker.create({
        home: ctx.home,
        rules,
        log: createLogger(ctx.env.KEYBROKER_LOG_LEVEL ?? "warn"),
        port: 0,
      });
      try {
        await broker.listen();
        view = localAgentView(broker.runtime, client);
      } catch (err) {
        // An unknown client or a token with no value: the broker must not keep this process up.
        await broker.close();
        throw err;
      }
      target = { url: broker.address.url, bundle: broker.bundlePath };
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
    const report = runReport(view, ctx.env, broker?.address.url);
    if (values.quiet !== true) for (const line of report.lines) ctx.err(`keybroker run: ${line}`);
    for (const w of report.warnings) ctx.err(`keybroker run: warning: ${w}`);
    // keybroker's own settings (the home, the rule file) are not the agent's business.
    for (const name of Object.keys(env)) if (name.startsWith("KEYBROKER_")) delete env[name];

    try {
      if (!isolate) {
        Object.assign(env, await buildAgentVariables(ctx, rules, view, target, preload));
        return await runPlain(ctx, command, env);
      }
      const where = new URL(target.url);
      const launch =
        running === undefined
          ? startLaunch(broker!, client, commandLine(command))
          : await adminRequest<StartedLaunch>(ctx.home, running, "POST", "launches", {
              client,
              command: commandLine(command),
              // The broker ends the launch if this process dies without ending it (decision 136).
              ...runProcess(),
            });
      let dir: LaunchDir | undefined;
      try {
        dir = makeLaunchDir(target.bundle);
        Object.assign(
          env,
          agentVariables({
            url: `http://127.0.0.1:${where.port}`,
            client: launch.user,
            token: launch.token,
            bundle: dir.bundle,
            placeholders: (
              await chooseForSharedHosts(ctx, rules, view, preload.use, (l) => ctx.err(`keybroker run: ${l}`))
            ).placeholders,
            ...(preload.nodePreload ? { nodePreload: NODE_PRELOAD, nodeOptions: ctx.env.NODE_OPTIONS } : {}),
          }),
        );
        return await runIsolated({
          dir,
          broker: { host: where.hostname, port: Number(where.port) },
          accept: broker === undefined ? undefined : (socket) => broker!.acceptConnection(socket),
          // A running broker listens inside the launch itself, so no relay is needed (decision 139).
          direct:
            running === undefined
              ? undefined
              : (pid) =>
                  adminRequest(ctx.home, running, "POST", `launches/${launch.id}/listen`, {
                    token: launch.token,
                    pid,
                  }),
          authorization: `Basic ${Buffer.from(`${launch.user}:${launch.token}`).toString("base64")}`,
          hide: hiddenPaths(rules, ctx.home, ctx.cwd, [path, view.rules.origin, ...(launch.hide ?? [])]),
          allow,
          command,
          cwd: ctx.cwd,
          env,
          err: ctx.err,
        });
      } finally {
        dir?.remove();
        if (running === undefined) endLaunch(broker!, launch.id);
        else await adminRequest(ctx.home, running, "DELETE", `launches/${launch.id}`).catch(() => undefined);
      }
    } finally {
      await broker?.close();
    }
  },
};

/** This process, for the broker to tie the launch to (decision 136); nothing when unseen. */
function runProcess(): { pid: number; start: string } | Record<string, never> {
  const start = processStart(process.pid);
  return start === undefined ? {} : { pid: process.pid, start };
}

/** The one line `run` says when the command is not isolated (docs/spec.md §20, decision 116). */
const NOT_ISOLATED =
  "keybroker run: not isolated: the command runs as your user and can read the broker's home (admin token, token store), .env files and your processes' environments; --isolate prevents that (Linux), --no-isolate or run: { isolate: false } in the rule file silences this line";

async function runPlain(ctx: Context, command: readonly string[], env: NodeJS.ProcessEnv): Promise<number> {
  const child = spawn(command[0]!, command.slice(1), { stdio: "inherit", env });
  const forward = (signal: NodeJS.Signals) => () => child.kill(signal);
  const handlers = (["SIGINT", "SIGTERM", "SIGHUP"] as const).map((s) => [s, forward(s)] as const);
  for (const [s, h] of handlers) process.on(s, h);
  const code = await new Promise<number>((resolve) => {
    child.once("error", (err) => {
      // As a shell says it: 127 for a command not found, 126 for one that cannot run.
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT") ctx.err(`keybroker run: command not found: ${command[0]}`);
      else if (code === "EACCES") ctx.err(`keybroker run: permission denied: ${command[0]}`);
      else ctx.err(`keybroker run: cannot start ${command[0]}: ${code ?? err.message}`);
      resolve(code === "EACCES" ? 126 : 127);
    });
    child.once("exit", (status, signal) => {
      resolve(status ?? 128 + (signal ? (constants.signals[signal] ?? 1) : 1));
    });
  });
  for (const [s, h] of handlers) process.off(s, h);
  return code;
}

/** `keybroker run ls -la`: the command needs `--` before it, say so rather than "unknown option -l". */
function hintDashes(argv: readonly string[]): void {
  const takesValue = new Set(["--client", "--home", "--config", "--port", "--allow-connect"]);
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
