// `--config` is honoured or refused, never silently ignored (decision 144). Commands that read
// no rule file refuse it; commands that act through a running broker use the broker's rules and
// say so when `--config` names another file.
import { resolve } from "node:path";
import { UsageError } from "./args.js";
import type { Context, RunningBroker } from "./context.js";

/** Refuses `--config` for a command that reads no rule file, saying why. */
export function refuseConfig(config: string | undefined, command: string, why: string): void {
  if (config !== undefined) throw new UsageError(`--config does not apply to keybroker ${command}: ${why}`);
}

/**
 * Warns when `--config` names another rule file than the one `broker` runs: the command acts
 * with the broker's rules, whatever the flag says.
 */
export function warnNotBrokersRules(
  ctx: Context,
  command: string,
  config: string | undefined,
  broker: Pick<RunningBroker, "rules" | "port">,
): void {
  if (config === undefined || resolve(ctx.cwd, config) === broker.rules) return;
  ctx.err(
    `keybroker ${command}: warning: --config ${config} is not the rule file of the broker on port ${broker.port} (${broker.rules}); ${command} uses the broker's rules`,
  );
}
