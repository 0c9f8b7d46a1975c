// Builds the resolver for a rule set: which sources exist and the lookup chain for bare names.
import { join, resolve } from "node:path";
import type { InfisicalConfig, Rules } from "../rules/types.js";
import { CmdSource } from "./cmd-source.js";
import { DotenvSource } from "./dotenv-source.js";
import { EnvSource } from "./env-source.js";
import { FileSource } from "./file-source.js";
import type { SdkLoader } from "./infisical-sdk.js";
import { InfisicalSource } from "./infisical-source.js";
import { describeAttempts, SecretResolver } from "./resolver.js";
import type { SecretSource } from "./source.js";

export const DEFAULT_INFISICAL_TIMEOUT_MS = 5_000;
export const DEFAULT_GRACE_MS = 10 * 60_000;
export const DEFAULT_CMD_TIMEOUT_MS = 10_000;
export const DEFAULT_CMD_TTL_MS = 5 * 60_000;

export interface SourceContext {
  readonly env: NodeJS.ProcessEnv;
  readonly home: string;
  readonly cwd?: string;
  readonly warn: (message: string) => void;
  /** The clock, for tests. */
  readonly now?: () => number;
  /** How @infisical/sdk is imported, for tests. */
  readonly loadInfisicalSdk?: SdkLoader;
}

/** The `.env` files tried, in order: the configured one, else `./.env` then `$home/.env`. */
export function dotenvCandidates(rules: Rules, ctx: SourceContext): string[] {
  if (rules.sources.dotenv !== undefined) return [rules.sources.dotenv];
  return [resolve(ctx.cwd ?? process.cwd(), ".env"), join(ctx.home, ".env")];
}

export function createSecretResolver(rules: Rules, ctx: SourceContext): SecretResolver {
  const cmd = rules.sources.cmd;
  const now = ctx.now === undefined ? {} : { now: ctx.now };
  // Every source but Infisical: they also hold Infisical's own login.
  const local = new Map<string, SecretSource>([
    ["env", new EnvSource(ctx.env)],
    ["dotenv", new DotenvSource(dotenvCandidates(rules, ctx))],
    ["file", new FileSource(ctx.warn)],
    [
      "cmd",
      new CmdSource({
        env: ctx.env,
        ...(ctx.cwd === undefined ? {} : { cwd: ctx.cwd }),
        timeoutMs: cmd?.timeoutMs ?? DEFAULT_CMD_TIMEOUT_MS,
        ttlMs: cmd?.ttlMs ?? DEFAULT_CMD_TTL_MS,
        graceMs: cmd?.graceMs ?? DEFAULT_GRACE_MS,
        warn: ctx.warn,
        ...now,
      }),
    ],
  ]);
  const sources = new Map(local);
  const infisical = rules.sources.infisical;
  if (infisical !== undefined) {
    const localResolver = new SecretResolver({
      sources: local,
      order: rules.sources.order.filter((name) => name !== "infisical"),
      ...now,
    });
    sources.set("infisical", infisicalSource(infisical, localResolver, ctx));
  }
  const order = rules.sources.order.filter((name) => sources.has(name));
  return new SecretResolver({ sources, order, ...now });
}

function infisicalSource(
  config: InfisicalConfig,
  local: SecretResolver,
  ctx: SourceContext,
): InfisicalSource {
  const credential = async (ref: string, key: string): Promise<string> => {
    const resolution = await local.resolve(ref);
    if (resolution.secret === undefined) {
      throw new Error(
        `Infisical's ${key} (sources.infisical.auth.${key}: ${ref}) has no value (${describeAttempts(resolution.attempts)}) — set it, then run keybroker check`,
      );
    }
    return resolution.secret.reveal();
  };
  return new InfisicalSource({
    siteUrl: config.siteUrl,
    projectId: config.projectId,
    environment: config.environment,
    path: config.path,
    ttlMs: config.ttlMs,
    timeoutMs: config.timeoutMs ?? DEFAULT_INFISICAL_TIMEOUT_MS,
    graceMs: config.graceMs ?? DEFAULT_GRACE_MS,
    credentials: async () => ({
      clientId: await credential(config.clientId, "client_id"),
      clientSecret: await credential(config.clientSecret, "client_secret"),
    }),
    warn: ctx.warn,
    ...(ctx.now === undefined ? {} : { now: ctx.now }),
    ...(ctx.loadInfisicalSdk === undefined ? {} : { loadSdk: ctx.loadInfisicalSdk }),
  });
}
