// Which rule file `check` reads and why, and what the home's running broker holds (decision
// 144). Run in another folder than the broker's, `check` used to read the embedded catalogue
// with none of the broker's keys in sight and fail; it now takes the running broker's rule file
// when nothing here names one, and counts a credential the broker holds as held.
import { resolve } from "node:path";
import type { StatusReport } from "../admin/status.js";
import { UserError } from "../core/errors.js";
import { CATALOGUE_ORIGIN } from "../rules/catalogue.js";
import { RuleFileError } from "../rules/errors.js";
import { findRuleFile, RULE_FILE_NAME } from "../rules/find.js";
import { adminRequest } from "./admin-client.js";
import { type Context, findRunningBrokers, type RunningBroker } from "./context.js";

export interface CheckSource {
  /** The rule file to read (undefined: the embedded catalogue). */
  readonly path: string | undefined;
  /** Why that one, in words. */
  readonly why: string;
  /** The home's running broker, when exactly one runs. */
  readonly broker: RunningBroker | undefined;
}

/** The rule file `check` reads: as every command finds it, else the running broker's. */
export async function checkSource(ctx: Context, config: string | undefined): Promise<CheckSource> {
  let path: string | undefined;
  try {
    path = findRuleFile({ config, env: ctx.env, cwd: ctx.cwd, home: ctx.home });
  } catch (err) {
    // As readRules reports it: `check --json` prints a RuleFileError's problems.
    if (err instanceof RuleFileError) throw new UserError(err.message, { cause: err });
    throw err;
  }
  const brokers = await findRunningBrokers(ctx.home);
  const broker = brokers.length === 1 ? brokers[0] : undefined;
  const here = resolve(ctx.cwd, RULE_FILE_NAME);
  if (config !== undefined) return { path, why: "named by --config", broker };
  if (ctx.env.KEYBROKER_CONFIG) return { path, why: "named by $KEYBROKER_CONFIG", broker };
  if (path === here) return { path, why: `./${RULE_FILE_NAME} in this folder`, broker };
  const none = `no --config, $KEYBROKER_CONFIG or ./${RULE_FILE_NAME} in ${ctx.cwd}`;
  if (broker !== undefined && broker.rules !== (path ?? CATALOGUE_ORIGIN)) {
    const theirs = broker.rules === CATALOGUE_ORIGIN ? undefined : broker.rules;
    return {
      path: theirs,
      why: `the running broker's (pid ${broker.pid}, port ${broker.port}): ${none}`,
      broker,
    };
  }
  if (path !== undefined) return { path, why: `the home's: ${none}`, broker };
  return { path, why: `${none}, and none in the home ${ctx.home}`, broker };
}

/**
 * The providers the running broker holds a credential for, when it runs the rules `check` read
 * (a credential it read from its own environment or folder is not visible here).
 */
export async function brokerCredentials(
  ctx: Context,
  broker: RunningBroker | undefined,
  origin: string,
): Promise<ReadonlySet<string>> {
  if (broker === undefined || broker.rules !== origin) return new Set();
  try {
    const report = await adminRequest<StatusReport>(ctx.home, broker, "GET", "status");
    return new Set(
      report.providers
        .filter((p) => p.active && p.credentials.some((c) => c.state !== "missing"))
        .map((p) => p.id),
    );
  } catch {
    return new Set();
  }
}
