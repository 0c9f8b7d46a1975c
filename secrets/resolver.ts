// Turns credential references into secrets: a bare NAME walks the lookup chain, a prefixed
// reference (`env:`, `dotenv:`, `file:`, ...) asks one source. Values are cached in memory
// briefly and never written anywhere.
import { homedir } from "node:os";
import { knownSecrets } from "../audit/scrub.js";
import { Secret } from "./secret.js";
import type { SecretSource } from "./source.js";

export interface Attempt {
  readonly source: string;
  readonly outcome: "found" | "missing" | "empty" | "error";
  readonly message?: string;
}

export interface Resolution {
  readonly ref: string;
  readonly secret: Secret | undefined;
  /** Every source asked, in order, and what it said: for `check` and error messages. */
  readonly attempts: readonly Attempt[];
}

export interface ParsedRef {
  /** undefined for a bare name (the lookup chain). */
  readonly source: string | undefined;
  readonly key: string;
}

const PREFIXES = ["env", "dotenv", "file", "infisical", "cmd"] as const;

export function parseRef(ref: string): ParsedRef {
  const colon = ref.indexOf(":");
  if (colon > 0) {
    const prefix = ref.slice(0, colon);
    if ((PREFIXES as readonly string[]).includes(prefix)) {
      let key = ref.slice(colon + 1);
      if (prefix === "file" && (key === "~" || key.startsWith("~/"))) key = homedir() + key.slice(1);
      return { source: prefix, key };
    }
  }
  return { source: undefined, key: ref };
}

export interface ResolverOptions {
  readonly sources: ReadonlyMap<string, SecretSource>;
  /** The chain for bare names; `env` is appended when missing (always the last resort). */
  readonly order: readonly string[];
  /** How long a resolved value is reused before the source is asked again. */
  readonly ttlMs?: number;
}

export class SecretResolver {
  readonly #sources: ReadonlyMap<string, SecretSource>;
  readonly #order: readonly string[];
  readonly #ttlMs: number;
  readonly #cache = new Map<string, { at: number; resolution: Resolution }>();
  readonly #inflight = new Map<string, Promise<Resolution>>();

  constructor(opts: ResolverOptions) {
    this.#sources = opts.sources;
    this.#order = opts.order.includes("env") ? opts.order : [...opts.order, "env"];
    this.#ttlMs = opts.ttlMs ?? 5_000;
  }

  get order(): readonly string[] {
    return this.#order;
  }

  /** The cached secret when it is still fresh: the request path's fast lane. */
  peek(ref: string): Secret | undefined {
    const hit = this.#cache.get(ref);
    if (hit !== undefined && Date.now() - hit.at < this.#ttlMs) return hit.resolution.secret;
    return undefined;
  }

  resolve(ref: string): Promise<Resolution> {
    const hit = this.#cache.get(ref);
    if (hit !== undefined && Date.now() - hit.at < this.#ttlMs) return Promise.resolve(hit.resolution);
    let pending = this.#inflight.get(ref);
    if (pending === undefined) {
      pending = this.#lookup(ref).finally(() => this.#inflight.delete(ref));
      this.#inflight.set(ref, pending);
    }
    return pending;
  }

  async #lookup(ref: string): Promise<Resolution> {
    const parsed = parseRef(ref);
    const chain = parsed.source === undefined ? this.#order : [parsed.source];
    const attempts: Attempt[] = [];
    let secret: Secret | undefined;
    for (const name of chain) {
      const source = this.#sources.get(name);
      if (source === undefined) {
        attempts.push({ source: name, outcome: "error", message: `source "${name}" is not configured` });
        continue;
      }
      const answer = await source.lookup(parsed.key);
      if (answer.kind === "found") {
        knownSecrets.add(answer.value);
        secret = new Secret(answer.value, ref, name);
        attempts.push({ source: name, outcome: "found" });
        break;
      }
      attempts.push(
        answer.kind === "error"
          ? { source: name, outcome: "error", message: answer.message }
          : { source: name, outcome: answer.kind },
      );
    }
    const resolution: Resolution = { ref, secret, attempts };
    this.#cache.set(ref, { at: Date.now(), resolution });
    return resolution;
  }
}

/** One line that says why a reference has no value, for errors and `check`. */
export function describeAttempts(attempts: readonly Attempt[]): string {
  return attempts
    .map((a) => (a.message ? `${a.source}: ${a.outcome} (${a.message})` : `${a.source}: ${a.outcome}`))
    .join(", ");
}
