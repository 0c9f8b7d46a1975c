// MCP logins' bindings and client registrations in the home (docs/spec.md §15): the McpStore (store.ts)
// of one broker, or several on one machine, in `tokens/mcp/` (0700, files 0600, atomic writes
// with fsync). Never read on the request path.
import { createHash } from "node:crypto";
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { ensurePrivateDir, writeFileAtomic } from "../../core/fs.js";
import type { McpBinding, McpRegistration, McpStore } from "./store.js";

async function readJson<T>(path: string): Promise<T | undefined> {
  try {
    return JSON.parse(await readFile(path, "utf8")) as T;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT" || err instanceof SyntaxError) return undefined;
    throw err;
  }
}

/** One broker, or several on one machine: `tokens/mcp/` in the home. */
export class HomeMcpStore implements McpStore {
  readonly dir: string;

  constructor(home: string) {
    this.dir = join(home, "tokens", "mcp");
  }

  #registration(issuer: string): string {
    const key = createHash("sha256").update(issuer).digest("hex").slice(0, 32);
    return join(this.dir, "registrations", `${key}.json`);
  }

  #binding(provider: string, id: string): string {
    return join(this.dir, "logins", `${provider}~${id}.json`);
  }

  async registration(issuer: string): Promise<McpRegistration | undefined> {
    const r = await readJson<McpRegistration>(this.#registration(issuer));
    return r?.issuer === issuer && typeof r.clientId === "string" ? r : undefined;
  }

  async putRegistration(r: McpRegistration): Promise<void> {
    ensurePrivateDir(this.dir);
    ensurePrivateDir(join(this.dir, "registrations"));
    writeFileAtomic(this.#registration(r.issuer), `${JSON.stringify(r, null, 2)}\n`);
  }

  async binding(provider: string, id: string): Promise<McpBinding | undefined> {
    const b = await readJson<McpBinding>(this.#binding(provider, id));
    return b?.provider === provider && b.id === id ? b : undefined;
  }

  async putBinding(b: McpBinding): Promise<void> {
    ensurePrivateDir(this.dir);
    ensurePrivateDir(join(this.dir, "logins"));
    writeFileAtomic(this.#binding(b.provider, b.id), `${JSON.stringify(b, null, 2)}\n`);
  }

  async removeBinding(provider: string, id: string): Promise<void> {
    await rm(this.#binding(provider, id), { force: true });
  }
}
