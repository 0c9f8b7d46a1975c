// Builds the resolver for a rule set: which sources exist and the lookup chain for bare names.
import { join, resolve } from "node:path";
import type { Rules } from "../rules/types.js";
import { DotenvSource } from "./dotenv-source.js";
import { EnvSource } from "./env-source.js";
import { FileSource } from "./file-source.js";
import { SecretResolver } from "./resolver.js";
import type { SecretSource } from "./source.js";

export interface SourceContext {
  readonly env: NodeJS.ProcessEnv;
  readonly home: string;
  readonly cwd?: string;
  readonly warn: (message: string) => void;
}

/** The `.env` files tried, in order: the configured one, else `./.env` then `$home/.env`. */
export function dotenvCandidates(rules: Rules, ctx: SourceContext): string[] {
  if (rules.sources.dotenv !== undefined) return [rules.sources.dotenv];
  return [resolve(ctx.cwd ?? process.cwd(), ".env"), join(ctx.home, ".env")];
}

export function createSecretResolver(rules: Rules, ctx: SourceContext): SecretResolver {
  const sources = new Map<string, SecretSource>([
    ["env", new EnvSource(ctx.env)],
    ["dotenv", new DotenvSource(dotenvCandidates(rules, ctx))],
    ["file", new FileSource(ctx.warn)],
  ]);
  const order = rules.sources.order.filter((name) => sources.has(name));
  return new SecretResolver({ sources, order });
}
