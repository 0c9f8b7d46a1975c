// The home's mark store: `$KEYBROKER_HOME/state/pools.json`, shared by every broker (and CLI
// command) using that home (decision 112). Each broker's pool writes the file itself (its marks
// must be on disk before a retry or an answer, decision 37) through `PoolFile`; `HomeMarkStore`
// is the other half, following what the other processes write. A write re-reads the file under a cross-process lock
// (proper-lockfile, as the token store's refresh lock) and merges what another process wrote
// before putting its own state over it, so no process resets another's mark. Reading needs no
// lock: every write is a rename of a complete file. Another process's writes are seen through
// fs.watch on the folder, and a stat of the file every second for a watch event that never comes
// (network file systems, some containers).
import { existsSync, type FSWatcher, readFileSync, renameSync, type Stats, watch } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import lockfile from "proper-lockfile";
import { writeFileAtomic, writeFileDurable } from "../../core/fs.js";
import type { CredentialState, MarkHolder, MarkStore, PoolData } from "./store.js";

export const STATE_VERSION = 1;
/** How often the file is checked for a change that fs.watch did not report. */
const POLL_MS = 1_000;
/** A lock older than this belongs to a process that died holding it. */
const LOCK_STALE_MS = 5_000;

export class PoolFile {
  readonly path: string;
  readonly #warn: (message: string) => void;

  constructor(path: string, warn: (message: string) => void) {
    this.path = path;
    this.#warn = warn;
  }

  /** The file at start; one that cannot be read is moved aside (the broker starts with no marks). */
  loadSync(): PoolData | undefined {
    if (!existsSync(this.path)) return undefined;
    try {
      return parsePoolData(readFileSync(this.path, "utf8"));
    } catch (err) {
      const aside = `${this.path}.corrupt-${Date.now()}`;
      try {
        renameSync(this.path, aside);
      } catch {
        // nothing more to do: we start empty either way
      }
      this.#warn(
        `the pool state file was unreadable (${(err as Error).message}); moved it to ${aside} and started with no marks`,
      );
      return undefined;
    }
  }

  /** What another process wrote; undefined when there is no file or it is not readable now. */
  async read(): Promise<PoolData | undefined> {
    try {
      return parsePoolData(await readFile(this.path, "utf8"));
    } catch {
      return undefined;
    }
  }

  #readSync(): PoolData | undefined {
    try {
      return parsePoolData(readFileSync(this.path, "utf8"));
    } catch {
      return undefined;
    }
  }

  /**
   * Writes durably (fsync of the file and the folder) what `build` makes of the file's current
   * content, under the lock. Resolves true when written; false when `stillWanted` said no.
   */
  async write(build: (disk: PoolData | undefined) => string, stillWanted: () => boolean): Promise<boolean> {
    const release = await lockfile.lock(this.path, {
      realpath: false,
      stale: LOCK_STALE_MS,
      retries: { retries: 100, minTimeout: 5, maxTimeout: 100 },
      // Held for one write: a lock taken over meanwhile (this process stalled past 5 s) costs at
      // most a merge that the next write redoes, never the process.
      onCompromised: () => {},
    });
    try {
      return await writeFileDurable(this.path, build(await this.read()), { stillWanted });
    } finally {
      await release().catch(() => {});
    }
  }

  /**
   * The same, synchronously (shutdown, resets). False when another write holds the lock (in this
   * process or another): the caller writes later instead.
   */
  writeSync(build: (disk: PoolData | undefined) => string): boolean {
    let release: () => void;
    try {
      release = lockfile.lockSync(this.path, {
        realpath: false,
        stale: LOCK_STALE_MS,
        onCompromised: () => {},
      });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ELOCKED") return false;
      throw err;
    }
    try {
      writeFileAtomic(this.path, build(this.#readSync()));
      return true;
    } finally {
      try {
        release();
      } catch {
        // Released already (compromised): the file was written either way.
      }
    }
  }

  /** Calls `changed` when another process may have written the file. Returns the stop function. */
  follow(changed: () => void): () => void {
    // The first check always reads: a write may have landed since this process loaded the file.
    let last: string | undefined;
    const check = () => {
      void stat(this.path).then(
        (s) => {
          const key = statKey(s);
          if (key !== last) {
            last = key;
            changed();
          }
        },
        () => {},
      );
    };
    let watcher: FSWatcher | undefined;
    try {
      watcher = watch(dirname(this.path), { persistent: false }, (_event, name) => {
        if (name === null || name.toString() === "pools.json") check();
      });
      watcher.on("error", () => watcher?.close());
    } catch {
      // No watch on this file system: the timer alone.
    }
    const timer = setInterval(check, POLL_MS);
    timer.unref();
    check();
    return () => {
      clearInterval(timer);
      watcher?.close();
    };
  }
}

/** The brokers on one home: another process's writes to pools.json reach this broker's pool. */
export class HomeMarkStore implements MarkStore {
  readonly #file: PoolFile;
  #unfollow: (() => void) | undefined;

  constructor(home: string) {
    this.#file = new PoolFile(poolFilePath(home), () => {});
  }

  attachPools(pools: MarkHolder): void {
    this.#unfollow?.();
    this.#unfollow = this.#file.follow(() => {
      void this.#file.read().then((data) => {
        if (data !== undefined) pools.absorb(data);
      });
    });
  }

  close(): void {
    this.#unfollow?.();
    this.#unfollow = undefined;
  }
}

/** Where a home keeps its pool state. */
export const poolFilePath = (home: string) => join(home, "state", "pools.json");

const statKey = (s: Stats) => `${s.ino}:${s.mtimeMs}:${s.size}`;

function parsePoolData(text: string): PoolData {
  const data = JSON.parse(text) as { version?: number; providers?: unknown; resets?: unknown };
  if (data.version !== STATE_VERSION || typeof data.providers !== "object" || data.providers === null) {
    throw new Error("unexpected layout");
  }
  const providers: Record<string, Record<string, CredentialState>> = {};
  for (const [provider, creds] of Object.entries(data.providers as Record<string, unknown>)) {
    if (typeof creds !== "object" || creds === null) continue;
    const map: Record<string, CredentialState> = {};
    for (const [id, value] of Object.entries(creds as Record<string, unknown>)) {
      const s = value as Partial<CredentialState> | null;
      if (s === null || typeof s !== "object") continue;
      if (!["ok", "usage_limit_reached", "invalid"].includes(s.state as string)) continue;
      map[id] = {
        state: s.state as CredentialState["state"],
        ...(typeof s.until === "number" ? { until: s.until } : {}),
        ...(typeof s.reason === "string" ? { reason: s.reason } : {}),
        ...(typeof s.fingerprint === "string" ? { fingerprint: s.fingerprint } : {}),
        ...(typeof s.markedAt === "number" ? { markedAt: s.markedAt } : {}),
        requests: Number(s.requests) || 0,
        marks: Number(s.marks) || 0,
        ...(typeof s.lastUsed === "number" ? { lastUsed: s.lastUsed } : {}),
      };
    }
    providers[provider] = map;
  }
  const resets: Record<string, Record<string, number>> = {};
  if (typeof data.resets === "object" && data.resets !== null) {
    for (const [provider, ids] of Object.entries(data.resets as Record<string, unknown>)) {
      if (typeof ids !== "object" || ids === null) continue;
      const map: Record<string, number> = {};
      for (const [id, at] of Object.entries(ids as Record<string, unknown>))
        if (typeof at === "number") map[id] = at;
      resets[provider] = map;
    }
  }
  return { providers, resets };
}
