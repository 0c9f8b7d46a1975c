// The interface every secret source implements, and what a lookup can answer.

export type Lookup =
  | { readonly kind: "found"; readonly value: string }
  | { readonly kind: "missing" }
  | { readonly kind: "empty" }
  | { readonly kind: "error"; readonly message: string };

export interface SecretSource {
  /** env, dotenv, file, infisical, cmd */
  readonly name: string;
  /** Looks a key up. Never throws; failures come back as `{kind: "error"}` without the value. */
  lookup(key: string): Promise<Lookup>;
}

export function fromValue(value: string | undefined): Lookup {
  if (value === undefined) return { kind: "missing" };
  if (value === "") return { kind: "empty" };
  return { kind: "found", value };
}
