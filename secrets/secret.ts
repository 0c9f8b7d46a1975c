// A real credential value wrapped so that only its id and fingerprint can reach text output.
import { createHash } from "node:crypto";
import { inspect } from "node:util";

export function fingerprintOf(value: string): string {
  return "sha256:" + createHash("sha256").update(value).digest("hex").slice(0, 12);
}

export class Secret {
  readonly #value: string;
  /** Credential id, e.g. `OPENAI_API_KEY` or `file:/run/secrets/openai`. */
  readonly id: string;
  /** The source that answered: env, dotenv, file, infisical, cmd. */
  readonly source: string;
  readonly fingerprint: string;

  constructor(value: string, id: string, source: string) {
    this.#value = value;
    this.id = id;
    this.source = source;
    this.fingerprint = fingerprintOf(value);
  }

  /** The real value. Call it only where the value goes upstream or into the scrubber. */
  reveal(): string {
    return this.#value;
  }

  redacted(): { id: string; source: string; fingerprint: string } {
    return { id: this.id, source: this.source, fingerprint: this.fingerprint };
  }

  toJSON(): { id: string; source: string; fingerprint: string } {
    return this.redacted();
  }

  toString(): string {
    return `[secret ${this.id} ${this.fingerprint}]`;
  }

  [inspect.custom](): string {
    return this.toString();
  }
}
