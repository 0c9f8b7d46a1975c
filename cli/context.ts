// What every command needs: the home, the rule file, the logger, and how to reach a running
// broker.
import { readFileSync } from "node:fs";
import { join } from "node:path";
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

export interface RunningBroker {
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  readonly activeProviders: readonly string[];
  readonly bundle: string;
}

/** The broker recorded in the home, if it answers its health check. */
export async function findRunningBroker(home: string): Promise<RunningBroker | undefined> {
  let state: RunningBroker;
  try {
    state = JSON.parse(readFileSync(join(home, "broker.json"), "utf8")) as RunningBroker;
  } catch {
    return undefined;
  }
  try {
    const res = await fetch(`${state.url}/__keybroker/health`, { signal: AbortSignal.timeout(1500) });
    const body = (await res.json()) as { ok?: boolean; pid?: number };
    return body.ok === true && body.pid === state.pid ? state : undefined;
  } catch {
    return undefined;
  }
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
