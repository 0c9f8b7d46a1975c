// A secret held in a file of its own (Docker and Kubernetes secrets): its content, trailing
// newline trimmed.
import { readFile, stat } from "node:fs/promises";
import { fromValue, type Lookup, type SecretSource } from "./source.js";

export class FileSource implements SecretSource {
  readonly name = "file";
  readonly #warned = new Set<string>();

  constructor(private readonly warn: (message: string) => void = () => {}) {}

  async lookup(path: string): Promise<Lookup> {
    try {
      const st = await stat(path);
      if ((st.mode & 0o077) !== 0 && !this.#warned.has(path)) {
        this.#warned.add(path);
        this.warn(
          `secret file ${path} is readable by other users (mode ${(st.mode & 0o777).toString(8)}): chmod 600 it`,
        );
      }
      const text = await readFile(path, "utf8");
      return fromValue(text.replace(/\r?\n$/, ""));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT") return { kind: "missing" };
      return { kind: "error", message: `cannot read ${path}: ${code ?? "error"}` };
    }
  }
}
