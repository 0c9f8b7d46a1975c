// A `.env` file, parsed with dotenv and re-read when it changes on disk.
import { readFileSync, statSync } from "node:fs";
import { parse } from "dotenv";
import { fromValue, type Lookup, type SecretSource } from "./source.js";

export class DotenvSource implements SecretSource {
  readonly name = "dotenv";
  #cache: { mtimeMs: number; size: number; values: Record<string, string> } | undefined;

  /** `candidates`: the files to try, first existing one wins. */
  constructor(private readonly candidates: readonly string[]) {}

  /** The file in use, or undefined when none of the candidates exists. */
  path(): string | undefined {
    for (const p of this.candidates) {
      try {
        if (statSync(p).isFile()) return p;
      } catch {
        // not there: try the next one
      }
    }
    return undefined;
  }

  async lookup(key: string): Promise<Lookup> {
    const path = this.path();
    if (path === undefined) return { kind: "missing" };
    try {
      const st = statSync(path);
      if (this.#cache === undefined || this.#cache.mtimeMs !== st.mtimeMs || this.#cache.size !== st.size) {
        this.#cache = { mtimeMs: st.mtimeMs, size: st.size, values: parse(readFileSync(path)) };
      }
      return fromValue(this.#cache.values[key]);
    } catch (err) {
      return {
        kind: "error",
        message: `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? "error"}`,
      };
    }
  }
}
