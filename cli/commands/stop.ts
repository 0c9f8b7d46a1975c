import { UserError } from "../../core/errors.js";
import { COMMON_HELP, parse, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { refuseConfig } from "../config-flag.js";
import { brokerPort, createContext, findRunningBrokers, type RunningBroker } from "../context.js";

/** Exit code when no broker runs for the home, as for `status`. */
export const NOT_RUNNING = 3;

export const stop: Command = {
  name: "stop",
  help: `Usage: keybroker stop [--port N] [--timeout SECONDS] [--home DIR]

Stops the broker running for this home: sends SIGTERM to the process its address record names
(after checking that this process is the broker answering at that address), then waits until
it has exited. The broker closes its connections, saves the pool marks, closes the audit log
and prints "keybroker stopped". Exits 0 once it has stopped, ${NOT_RUNNING} when no broker is running
for the home, 1 when it is still running after the timeout.

  --port N         the broker on this port, when several run on the home
  --timeout S      how long to wait for it to exit (default 10 seconds)

A broker run by a service manager is better stopped by it (systemctl --user stop keybroker,
launchctl bootout, docker stop): see the README.

${COMMON_HELP}`,
  async run(argv) {
    const { values } = parse(argv, { port: { type: "string" }, timeout: { type: "string" } });
    const port = brokerPort(values.port);
    const timeout = values.timeout === undefined ? 10 : Number(values.timeout);
    if (!Number.isFinite(timeout) || timeout <= 0)
      throw new UsageError(`--timeout: expected a number of seconds, got "${values.timeout}"`);
    refuseConfig(values.config, "stop", "it stops the home's brokers; --port N names one");
    const ctx = createContext(values);
    const all = await findRunningBrokers(ctx.home);
    const brokers = port === undefined ? all : all.filter((b) => b.port === port);
    if (brokers.length === 0) {
      const also = port !== undefined && all.length > 0 ? ` on port ${port} (running: ${ports(all)})` : "";
      ctx.err(`keybroker stop: no broker is running for ${ctx.home}${also}`);
      return NOT_RUNNING;
    }
    if (brokers.length > 1) {
      throw new UsageError(
        `${brokers.length} brokers run on this home (${ports(brokers)}): say which with --port`,
      );
    }
    const broker = brokers[0]!;
    try {
      process.kill(broker.pid, "SIGTERM");
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ESRCH") {
        ctx.out(`keybroker stopped (pid ${broker.pid}, ${broker.url})`);
        return 0;
      }
      throw new UserError(`cannot signal the broker (pid ${broker.pid}): ${code ?? (err as Error).message}`);
    }
    if (!(await exited(broker.pid, timeout * 1000))) {
      throw new UserError(
        `the broker (pid ${broker.pid}) is still running after ${timeout}s; see its log, or kill ${broker.pid}`,
      );
    }
    ctx.out(`keybroker stopped (pid ${broker.pid}, ${broker.url})`);
    return 0;
  },
};

function ports(brokers: readonly RunningBroker[]): string {
  return brokers.map((b) => `port ${b.port}, pid ${b.pid}`).join("; ");
}

/** Whether the process is gone within `ms`. It is not our child: nothing to await but its absence. */
async function exited(pid: number, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      process.kill(pid, 0);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ESRCH") return true;
    }
    if (Date.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
