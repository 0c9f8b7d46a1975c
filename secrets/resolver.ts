// Turns credential references into secrets: a bare NAME walks the lookup chain, a prefixed
// reference (`env:`, `dotenv:`, `file:`, `infisical:`, `cmd:`) asks one source. A resolution is
// kept in memory until the earliest expiry its sources gave (Infisical: its TTL; local files:
// the resolver's default) and never written anywhere.
import { knownSecrets } from "../core/scrub.js";
import { parseRef } from "../rules/credential-ref.js";
import { Secret } from "./secret.js";
import type { SecretSource } from "./source.js";

export interface Attempt {
  readonly source: string;
  readonly outcome: "found" | "missing" | "empty" | "error";
  /** Why it failed, or for a stale `found`, why it could not be refreshed. */
  readonly message?: string;
  /** A `found` value served from memory while its source fails. */
  readonly stale?: boolean;
}

export interface Resolution {
  readonly ref: string;
  readonly secret: Secret | undefined;
  /** Every source asked, in order, and what it said: for `check` and error messages. */
  readonly attempts: readonly Attempt[];
}

export interface ResolverOptions {
  readonly sources: ReadonlyMap<string, SecretSource>;
  /** The chain for bare names; `env` is appended when missing (always the last resort). */
  readonly order: readonly string[];
  /** How long an answer is reused when its source gives no expiry of its own. */
  readonly ttlMs?: number;
  readonly now?: () => number;
}

interface CacheEntry {
  readonly expiresAt: number;
  readonly resolution: Resolution;
}

export class SecretResolver {
  readonly #sources: ReadonlyMap<string, SecretSource>;
  readonly #order: readonly string[];
  readonly #ttlMs: number;
  readonly #now: () => number;
  readonly #cache = new Map<string, CacheEntry>();
  readonly #inflight = new Map<string, Promise<Resolution>>();

  constructor(opts: ResolverOptions) {
    this.#sources = opts.sources;
    this.#order = opts.order.includes("env") ? opts.order : [...opts.order, "env"];
    this.#ttlMs = opts.ttlMs ?? 5_000;
    this.#now = opts.now ?? Date.now;
  }

  get order(): readonly string[] {
    return this.#order;
  }

  /** The cached secret when it is still fresh: the request path's fast lane. */
  peek(ref: string): Secret | undefined {
    const hit = this.#cache.get(ref);
    return hit !== undefined && this.#now() < hit.expiresAt ? hit.resolution.secret : undefined;
  }

  /**
   * The reference's current value and how it was found. One lookup per reference is in flight
   * at a time; references are resolved independently, so a slow source delays only the
   * references that reach it.
   */
  resolve(ref: string): Promise<Resolution> {
    const hit = this.#cache.get(ref);
    if (hit !== undefined && this.#now() < hit.expiresAt) return Promise.resolve(hit.resolution);
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
    const now = this.#now();
    let expiresAt = Number.POSITIVE_INFINITY;
    let secret: Secret | undefined;
    for (const name of chain) {
      const source = this.#sources.get(name);
      if (source === undefined) {
        expiresAt = Math.min(expiresAt, now + this.#ttlMs);
        attempts.push({
          source: name,
          outcome: "error",
          message:
            name === "infisical"
              ? "Infisical is not configured — add sources.infisical to the rule file"
              : `source "${name}" is not configured`,
        });
        continue;
      }
      const answer = await source.lookup(parsed.key);
      expiresAt = Math.min(expiresAt, answer.expiresAt ?? now + this.#ttlMs);
      if (answer.kind === "found") {
        secret = this.#secretFor(ref, name, answer.value);
        attempts.push(
          answer.stale === undefined
            ? { source: name, outcome: "found" }
            : { source: name, outcome: "found", stale: true, message: answer.stale },
        );
        break;
      }
      attempts.push(
        answer.kind === "error"
          ? { source: name, outcome: "error", message: answer.message }
          : { source: name, outcome: answer.kind },
      );
    }
    const resolution: Resolution = { ref, secret, attempts };
    this.#cache.set(ref, { expiresAt, resolution });
    return resolution;
  }

  /** The previous Secret when the value did not change (same fingerprint, no new scrub entry). */
  #secretFor(ref: string, source: string, value: string): Secret {
    const previous = this.#cache.get(ref)?.resolution.secret;
    if (previous !== undefined && previous.source === source && previous.reveal() === value) return previous;
    knownSecrets.add(value);
    return new Secret(value, ref, source);
  }
}

/** One attempt in words: `infisical: missing`, `cmd: error (command "x" exited with status 1)`. */
export function describeAttempt(a: Attempt): string {
  const outcome = a.stale === true ? "found (stale)" : a.outcome;
  return a.message ? `${a.source}: ${outcome} (${a.message})` : `${a.source}: ${outcome}`;
}

/** One line that says why a reference has no value, for errors and `check`. */
export function describeAttempts(attempts: readonly Attempt[]): string {
  return attempts.map(describeAttempt).join(", ");
}
