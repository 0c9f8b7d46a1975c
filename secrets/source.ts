// The interface every secret source implements, and what a lookup can answer.

export type Answer =
  | {
      readonly kind: "found";
      readonly value: string;
      /** Set when the source is failing and this is its last good value: why it is stale. */
      readonly stale?: string;
    }
  | { readonly kind: "missing" }
  | { readonly kind: "empty" }
  | { readonly kind: "error"; readonly message: string };

/**
 * What a source said about a key. `expiresAt` (epoch ms) is how long the answer may be reused
 * without asking again; without it the resolver's default applies.
 */
export type Lookup = Answer & { readonly expiresAt?: number };

export interface SecretSource {
  /** env, dotenv, file, infisical, cmd */
  readonly name: string;
  /**
   * Looks a key up. Never throws; failures come back as `{kind: "error"}` with a message that
   * never holds the value (nor output that could hold it).
   */
  lookup(key: string): Promise<Lookup>;
}

export function fromValue(value: string | undefined): Lookup {
  if (value === undefined) return { kind: "missing" };
  if (value === "") return { kind: "empty" };
  return { kind: "found", value };
}

/** The message of anything thrown, for an `error` answer. */
export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
