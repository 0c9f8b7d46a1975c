// The home's OAuth logins (docs/spec.md §8): the TokenStore (store.ts) of one broker, or several on one
// machine. One file per login in `$KEYBROKER_HOME/tokens/` (folder 0700, files 0600, atomic
// writes with fsync); the refresh lock is taken with proper-lockfile, whose stale-lock recovery
// survives a holder killed with `kill -9`.
import { type FSWatcher, watch } from "node:fs";
import { readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import lockfile from "proper-lockfile";
import { ensurePrivateDir, writeFileAtomic } from "../../core/fs.js";
import { parseLogin, type StoredLogin, serializeLogin } from "./login.js";
import { type LockOptions, LockTimeoutError, type TokenStore } from "./store.js";

/** `tokens/<provider>~<label>.json`: `~` is in neither a provider id nor a label. */
const FILE = /^([a-z][a-z0-9._-]*)~([A-Za-z0-9][A-Za-z0-9._-]*)\.json$/;

/** Every login in a home's token store, for read-only commands (never creates the folder). */
export function readLogins(home: string): Promise<StoredLogin[]> {
  return new FileTokenStore(home).list();
}

export class FileTokenStore implements TokenStore {
  readonly dir: string;

  constructor(home: string) {
    this.dir = join(home, "tokens");
  }

  #path(provider: string, id: string): string {
    return join(this.dir, `${provider}~${id}.json`);
  }

  async list(provider?: string): Promise<StoredLogin[]> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw err;
    }
    const out: StoredLogin[] = [];
    for (const name of names.sort()) {
      const m = FILE.exec(name);
      if (m === null || (provider !== undefined && m[1] !== provider)) continue;
      const login = await this.get(m[1]!, m[2]!);
      if (login !== undefined) out.push(login);
    }
    return out;
  }

  async get(provider: string, id: string): Promise<StoredLogin | undefined> {
    let text: string;
    try {
      text = await readFile(this.#path(provider, id), "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
    const login = parseLogin(text);
    return login !== undefined && login.provider === provider && login.id === id ? login : undefined;
  }

  async put(login: StoredLogin, ifGeneration?: number): Promise<boolean> {
    ensurePrivateDir(this.dir);
    if (ifGeneration !== undefined) {
      const current = await this.get(login.provider, login.id);
      if (current === undefined || current.generation !== ifGeneration) return false;
    }
    writeFileAtomic(this.#path(login.provider, login.id), serializeLogin(login));
    return true;
  }

  async remove(provider: string, id: string): Promise<boolean> {
    const path = this.#path(provider, id);
    try {
      await rm(path);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return false;
      throw err;
    }
  }

  async withRefreshLock<T>(
    provider: string,
    id: string,
    opts: LockOptions,
    fn: () => Promise<T>,
  ): Promise<T> {
    ensurePrivateDir(this.dir);
    const target = join(this.dir, `${provider}~${id}.refresh`);
    const staleMs = Math.max(2000, opts.staleMs);
    const deadline = Date.now() + opts.waitMs;
    let release: (() => Promise<void>) | undefined;
    let compromised: Error | undefined;
    while (release === undefined) {
      try {
        release = await lockfile.lock(target, {
          realpath: false,
          stale: staleMs,
          onCompromised: (err) => {
            compromised = err;
          },
        });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ELOCKED") throw err;
        if (Date.now() >= deadline) {
          throw new LockTimeoutError(
            `the refresh lock of ${provider}/${id} is held by another process (waited ${opts.waitMs} ms)`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 50 + Math.floor(Math.random() * 100)));
      }
    }
    try {
      return await fn();
    } finally {
      // A compromised lock was taken over as stale: it is no longer ours to release.
      if (compromised === undefined) await release().catch(() => {});
    }
  }

  watch(onChange: (provider: string, id: string) => void): () => void {
    ensurePrivateDir(this.dir);
    let watcher: FSWatcher | undefined;
    try {
      watcher = watch(this.dir, { persistent: false }, (_event, name) => {
        const m = name === null ? null : FILE.exec(String(name));
        if (m !== null) onChange(m[1]!, m[2]!);
      });
      watcher.on("error", () => {});
    } catch {
      // A folder that cannot be watched: logins are still read at start.
    }
    return () => watcher?.close();
  }
}
