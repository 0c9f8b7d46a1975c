// A secret held in a file of its own (Docker and Kubernetes secrets): its content, trailing
// newline trimmed. Read again on every lookup the resolver makes, so a rotated file is used
// within the resolver's TTL.
import { readFile, stat } from "node:fs/promises";
import { fromValue, type Lookup, type SecretSource } from "./source.js";

export class FileSource implements SecretSource {
  readonly name = "file";
  readonly #warned = new Set<string>();

  constructor(private readonly warn: (message: string) => void = () => {}) {}

  async lookup(path: string): Promise<Lookup> {
    try {
      const st = await stat(path);
      if (!st.isFile()) return { kind: "error", message: `${path} is not a file` };
      if ((st.mode & 0o044) !== 0 && !this.#warned.has(path)) {
        this.#warned.add(path);
        const who = (st.mode & 0o004) !== 0 ? "every user" : "its group";
        this.warn(
          `secret file ${path} is readable by ${who} (mode ${(st.mode & 0o777).toString(8)}): chmod 600 it`,
        );
      }
      const text = await readFile(path, "utf8");
      return fromValue(text.replace(/\r?\n$/, ""));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT") return { kind: "missing" };
      const hint = code === "EACCES" ? ": keybroker may not read it — fix its owner or mode" : "";
      return { kind: "error", message: `cannot read ${path} (${code ?? "error"})${hint}` };
    }
  }
}
