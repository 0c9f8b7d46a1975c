// The `infisical` source. A bare name is read from the configured folder, listed in one call
// and cached as a whole; `infisical:/path/NAME` reads that one secret. Both go through a
// RefreshCache: TTL, one fetch in flight per key, a bounded wait, the last value served while
// Infisical fails (with a warning) for the grace period, then fail closed.
import {
  InfisicalClient,
  type InfisicalClientOptions,
  type InfisicalValue,
  joinPath,
} from "./infisical-client.js";
import { type CacheAnswer, RefreshCache } from "./refresh-cache.js";
import type { Lookup, SecretSource } from "./source.js";

export interface InfisicalSourceOptions extends Omit<InfisicalClientOptions, "connectTimeoutMs"> {
  /** The folder bare names are read from, e.g. `/agents`. */
  readonly path: string;
  readonly ttlMs: number;
  readonly graceMs: number;
  /** The longest a lookup waits for Infisical. */
  readonly timeoutMs: number;
  readonly warn: (message: string) => void;
}

const SEP = "\0";

/** A cache key, as shown in messages. */
function label(key: string): string {
  const [kind, folder = "/", name = ""] = key.split(SEP);
  return kind === "folder" ? `folder ${folder}` : joinPath(folder, name);
}

/** `/llm/NAME` → folder `/llm`, name `NAME`; `/NAME` → folder `/`. */
function splitSecretPath(path: string): { folder: string; name: string } {
  const slash = path.lastIndexOf("/");
  return { folder: slash <= 0 ? "/" : path.slice(0, slash), name: path.slice(slash + 1) };
}

export class InfisicalSource implements SecretSource {
  readonly name = "infisical";
  readonly #path: string;
  readonly #folders: RefreshCache<Map<string, InfisicalValue>>;
  readonly #secrets: RefreshCache<InfisicalValue | undefined>;

  constructor(opts: InfisicalSourceOptions) {
    this.#path = opts.path;
    const client = new InfisicalClient({ ...opts, connectTimeoutMs: opts.timeoutMs });
    const cacheOptions = {
      ttlMs: opts.ttlMs,
      graceMs: opts.graceMs,
      timeoutMs: opts.timeoutMs,
      ...(opts.now === undefined ? {} : { now: opts.now }),
      onStale: (key: string, why: string, until: number) =>
        opts.warn(
          `Infisical is failing (${why}): serving the last value of ${label(key)} until ${new Date(until).toISOString()}, then credentials held only there become unavailable`,
        ),
      onExpired: (key: string, why: string) =>
        opts.warn(
          `Infisical is still failing (${why}): the last value of ${label(key)} is past its grace period and no longer used — requests that need it fail with credential_unavailable until Infisical answers`,
        ),
      onRecovered: (key: string) => opts.warn(`Infisical answers again for ${label(key)}`),
    };
    this.#folders = new RefreshCache((key) => client.listFolder(key.split(SEP)[1] ?? "/"), cacheOptions);
    this.#secrets = new RefreshCache((key) => {
      const [, folder = "/", name = ""] = key.split(SEP);
      return client.getSecret(folder, name);
    }, cacheOptions);
  }

  async lookup(key: string): Promise<Lookup> {
    if (key.startsWith("/")) {
      const { folder, name } = splitSecretPath(key);
      const answer = await this.#secrets.get(["secret", folder, name].join(SEP), {
        waitFor: (previous) => previous !== undefined && previous.value !== "",
      });
      return toLookup(answer, (data) => data);
    }
    const answer = await this.#folders.get(["folder", this.#path].join(SEP), {
      // Only a name Infisical held is worth waiting for; the others are looked up further on.
      waitFor: (previous) => (previous.get(key)?.value ?? "") !== "",
    });
    return toLookup(answer, (data) => data.get(key));
  }
}

function toLookup<T>(answer: CacheAnswer<T>, pick: (data: T) => InfisicalValue | undefined): Lookup {
  const { expiresAt } = answer;
  if (answer.kind === "error") return { kind: "error", message: answer.message, expiresAt };
  const found = pick(answer.data);
  if (found === undefined) return { kind: "missing", expiresAt };
  if (found.hidden) {
    return {
      kind: "error",
      message:
        "Infisical hides this secret's value from the machine identity — give it permission to read secret values",
      expiresAt,
    };
  }
  if (found.value === "") return { kind: "empty", expiresAt };
  return answer.stale === undefined
    ? { kind: "found", value: found.value, expiresAt }
    : { kind: "found", value: found.value, stale: answer.stale, expiresAt };
}
