// What every command needs: the home, the rule file, the logger, and how to reach a running
// broker.
import { type BrokerRecord, readBrokerRecords } from "../core/broker-records.js";
import { UserError } from "../core/errors.js";
import { homeKey, homePath } from "../core/home.js";
import { createLogger, type Logger } from "../core/log.js";
import { Runtime } from "../proxy/runtime.js";
import { RuleFileError } from "../rules/errors.js";
import { findRuleFile } from "../rules/find.js";
import { loadRulesIsolated } from "../rules/load-isolated.js";
import type { Rules } from "../rules/types.js";
import type { SecretResolver } from "../secrets/resolver.js";
import { createSecretResolver } from "../secrets/sources.js";
import { UsageError } from "./args.js";
import { localRequest } from "./local-http.js";

export interface CommonOptions {
  readonly home?: string | undefined;
  readonly config?: string | undefined;
}

export interface Context {
  readonly home: string;
  readonly env: NodeJS.ProcessEnv;
  readonly cwd: string;
  readonly log: Logger;
  readonly out: (line: string) => void;
  readonly err: (line: string) => void;
}

export function createContext(opts: CommonOptions): Context {
  return {
    home: homePath(opts.home),
    env: process.env,
    cwd: process.cwd(),
    log: createLogger(),
    out: (line) => process.stdout.write(line + "\n"),
    err: (line) => process.stderr.write(line + "\n"),
  };
}

/**
 * The rule file's path (or undefined for the embedded catalogue) and the loaded rules, checked
 * in a short-lived child process (rules/load-isolated.ts): for the broker, which runs for days. Commands
 * that exit at once use readRules (cli/read-rules.ts).
 */
export async function readRulesIsolated(
  ctx: Context,
  config: string | undefined,
): Promise<{ path: string | undefined; rules: Rules }> {
  try {
    const path = findRuleFile({ config, env: ctx.env, cwd: ctx.cwd, home: ctx.home });
    return { path, rules: await loadRulesIsolated(path) };
  } catch (err) {
    if (err instanceof RuleFileError) throw new UserError(err.message);
    throw err;
  }
}

export type RunningBroker = BrokerRecord;

/** Every broker of the home whose record is live and that answers its health check. */
export async function findRunningBrokers(home: string): Promise<RunningBroker[]> {
  const answers = await Promise.all(
    readBrokerRecords(home).map(async (record) => {
      try {
        const res = await localRequest(`${record.url}/__keybroker/health`, { timeoutMs: 1500 });
        const body = JSON.parse(res.text) as { ok?: boolean; pid?: number };
        return body.ok === true && body.pid === record.pid ? record : undefined;
      } catch {
        return undefined;
      }
    }),
  );
  return answers.filter((r) => r !== undefined);
}

/**
 * The running broker a command talks to: the only one of the home, or the one on `port`.
 * Several without `--port` is a usage error that lists them.
 */
export async function findRunningBroker(home: string, port?: number): Promise<RunningBroker | undefined> {
  const running = await findRunningBrokers(home);
  if (port !== undefined) return running.find((b) => b.port === port);
  if (running.length <= 1) return running[0];
  throw new UsageError(
    `${running.length} brokers run for this home (${running
      .map((b) => `port ${b.port}, pid ${b.pid}`)
      .join("; ")}): pick one with --port`,
  );
}

/** `--port N` of the commands that talk to a running broker. */
export function brokerPort(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const port = Number(value);
  if (!Number.isInteger(port) || port <= 0 || port > 65535)
    throw new UsageError(`--port: not a port number: ${value}`);
  return port;
}

/** The resolver the command line uses: this process's environment, `.env` and files. */
export function localResolver(
  ctx: Context,
  rules: Rules,
  warn: (message: string) => void = () => {},
): SecretResolver {
  return createSecretResolver(rules, { env: ctx.env, home: ctx.home, cwd: ctx.cwd, warn });
}

/** The rules resolved here, without a broker: which providers are active, placeholders. */
export function localRuntime(ctx: Context, rules: Rules, warn?: (message: string) => void): Promise<Runtime> {
  return Runtime.build(rules, localResolver(ctx, rules, warn), homeKey(ctx.home));
}
