// `.env` files, parsed with dotenv (quotes, `export` prefixes, multi-line values, comments) and
// parsed again when a file changes on disk. With several candidates (the default `./.env`,
// then `$KEYBROKER_HOME/.env`) each existing one is asked in turn: a name missing or empty in
// the first is looked up in the next.
import { readFileSync, statSync } from "node:fs";
import { parse } from "dotenv";
import type { Lookup, SecretSource } from "./source.js";

interface Parsed {
  readonly stamp: string;
  readonly values: Record<string, string>;
}

export class DotenvSource implements SecretSource {
  readonly name = "dotenv";
  readonly #parsed = new Map<string, Parsed>();

  /** `candidates`: the files to read, in order. */
  constructor(private readonly candidates: readonly string[]) {}

  /** The candidate files that exist. */
  paths(): string[] {
    return this.candidates.filter((p) => {
      try {
        return statSync(p).isFile();
      } catch {
        return false;
      }
    });
  }

  /** The first file in use, or undefined when none of the candidates exists. */
  path(): string | undefined {
    return this.paths()[0];
  }

  async lookup(key: string): Promise<Lookup> {
    let empty = false;
    let error: string | undefined;
    for (const path of this.candidates) {
      let values: Record<string, string> | undefined;
      try {
        values = this.#read(path);
      } catch (err) {
        error ??= `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? "error"})`;
        continue;
      }
      const value = values?.[key];
      if (value === undefined) continue;
      if (value !== "") return { kind: "found", value };
      empty = true;
    }
    if (error !== undefined) return { kind: "error", message: error };
    return { kind: empty ? "empty" : "missing" };
  }

  /** The file's variables, or undefined when it does not exist. */
  #read(path: string): Record<string, string> | undefined {
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
    if (!st.isFile()) return undefined;
    const stamp = `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
    const cached = this.#parsed.get(path);
    if (cached?.stamp === stamp) return cached.values;
    const values = parse(readFileSync(path));
    this.#parsed.set(path, { stamp, values });
    return values;
  }
}
