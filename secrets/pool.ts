// Credential pools: which credential of a provider a request uses, and what each credential's
// state is. A quota answer marks only the credential that got it; a mark only ever extends its
// deadline (`mergeMark`, state/marks/merge.ts); a mark whose time has come is dropped, so the credential is
// tried again. State lives in memory and is written to `$KEYBROKER_HOME/state/pools.json`
// (state/marks/home.ts: atomic, 0600, merged under a lock with what other processes on the home
// wrote).
//
// A mark must survive a crash (docs/spec.md §7): `markUsageLimit` / `markInvalid` start a durable write
// (temporary file, fsync, rename, fsync of the folder) at once, and `durable()` resolves when it
// is done; the pool's caller awaits it before retrying on another credential or answering. A
// request that marks nothing touches no disk: counters ride along, or are written later.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ensurePrivateDir } from "../core/fs.js";
import type { PoolStrategy } from "../rules/types.js";
import { PoolFile, poolFilePath, STATE_VERSION } from "../state/marks/home.js";
import { mergeMark, type SharedMark } from "../state/marks/merge.js";
import type { CredentialState, MarkHolder, MarkMirror, PoolData } from "../state/marks/store.js";

export type { SharedMark } from "../state/marks/merge.js";
export type { CredentialState, CredentialStateName } from "../state/marks/store.js";

export interface PoolMember {
  /** The credential reference, which is also its id within the provider. */
  readonly id: string;
  /** The fingerprint of its current value: an `invalid` mark applies to that value only. */
  readonly fingerprint?: string;
}

export interface PoolSpec {
  readonly provider: string;
  readonly strategy: PoolStrategy;
  readonly affinity?: "client" | undefined;
}

const MARK_SAVE_DELAY_MS = 200;
const COUNTER_SAVE_DELAY_MS = 10_000;

export class PoolState implements MarkHolder {
  readonly #file: PoolFile;
  /** provider → credential id → state */
  readonly #states = new Map<string, Map<string, CredentialState>>();
  /** provider → credential id (or `*`) → when its marks were last cleared, here or elsewhere. */
  readonly #resets = new Map<string, Map<string, number>>();
  readonly #cursor = new Map<string, number>();
  readonly #affinity = new Map<string, string>();
  #saveTimer: NodeJS.Timeout | undefined;
  #saveDue = 0;
  #dirty = false;
  /** A durable write that has not started yet: it will hold every change made before it starts. */
  #queued: Promise<void> | undefined;
  /** The latest durable write (queued or running); never rejects. */
  #lastWrite: Promise<void> = Promise.resolve();
  /** Snapshots taken for writing, and the newest one on disk: an older one never overwrites it. */
  #snapshots = 0;
  #onDisk = 0;
  #mirror: MarkMirror | undefined;
  readonly #warn: (message: string) => void;

  constructor(home: string, warn: (message: string) => void = () => {}) {
    const dir = join(home, "state");
    ensurePrivateDir(dir);
    this.#warn = warn;
    this.#file = new PoolFile(poolFilePath(home), warn);
    const data = this.#file.loadSync();
    for (const [provider, creds] of Object.entries(data?.providers ?? {}))
      this.#states.set(provider, new Map(Object.entries(creds)));
    for (const [provider, ids] of Object.entries(data?.resets ?? {}))
      this.#resets.set(provider, new Map(Object.entries(ids)));
  }

  /** When the credential's marks were last cleared (its own reset or its provider's), if known. */
  resetAt(provider: string, id: string): number | undefined {
    const m = this.#resets.get(provider);
    if (m === undefined) return undefined;
    const one = m.get(id);
    const all = m.get("*");
    return one === undefined ? all : all === undefined ? one : Math.max(one, all);
  }

  /**
   * Takes in what another process wrote to the home: its resets clear the marks made here before
   * them, its marks merge by the one rule (extend-only). Not a change to write back by itself.
   * The home's mark store (state/marks/home.ts) calls it with what it read.
   */
  absorb(data: PoolData, now = Date.now()): void {
    for (const [provider, ids] of Object.entries(data.resets)) {
      let mine = this.#resets.get(provider);
      if (mine === undefined) {
        mine = new Map();
        this.#resets.set(provider, mine);
      }
      for (const [id, at] of Object.entries(ids)) {
        if ((mine.get(id) ?? -1) >= at) continue;
        mine.set(id, at);
        for (const [cid, s] of this.#states.get(provider) ?? []) {
          if ((id === "*" || id === cid) && s.state !== "ok" && (s.markedAt ?? 0) <= at) clearMark(s);
        }
      }
    }
    for (const [provider, creds] of Object.entries(data.providers)) {
      for (const [id, s] of Object.entries(creds)) {
        if (s.state === "ok") continue;
        const resetAt = this.resetAt(provider, id);
        if (resetAt !== undefined && (s.markedAt ?? 0) <= resetAt) continue;
        this.#apply(provider, id, sharedMark(s), now, s.markedAt);
      }
    }
  }

  /** Merges a mark from elsewhere into this copy (state/marks/merge.ts: the one rule). True when it changed. */
  #apply(provider: string, id: string, mark: SharedMark, now: number, markedAt = now): boolean {
    const s = this.get(provider, id);
    const held = s.state === "ok" ? undefined : sharedMark(s);
    const kept = mergeMark(held, mark, now);
    if (kept === held || kept === undefined) return false;
    s.state = kept.state;
    if (kept.until === undefined) delete s.until;
    else s.until = kept.until;
    if (kept.reason === undefined) delete s.reason;
    else s.reason = kept.reason;
    if (kept.fingerprint === undefined) delete s.fingerprint;
    else s.fingerprint = kept.fingerprint;
    s.markedAt = Math.max(s.markedAt ?? 0, markedAt);
    this.#unpin(provider, id);
    return true;
  }

  /** The state of one credential (created on first sight). */
  get(provider: string, id: string): CredentialState {
    let map = this.#states.get(provider);
    if (map === undefined) {
      map = new Map();
      this.#states.set(provider, map);
    }
    let s = map.get(id);
    if (s === undefined) {
      s = { state: "ok", requests: 0, marks: 0 };
      map.set(id, s);
    }
    return s;
  }

  /** Drops a usage mark whose time has come, so the credential is tried again. */
  #expire(s: CredentialState, now: number): void {
    if (s.state === "usage_limit_reached" && (s.until === undefined || s.until <= now)) {
      s.state = "ok";
      delete s.until;
      delete s.reason;
      this.#changed();
    }
  }

  usable(provider: string, id: string, now = Date.now()): boolean {
    const s = this.get(provider, id);
    this.#expire(s, now);
    return s.state === "ok";
  }

  /**
   * Picks the credential for a request among `candidates` (the pool's members that have a
   * value), by the pool's strategy. Returns undefined when every one is marked.
   */
  pick<T extends PoolMember>(
    spec: PoolSpec,
    candidates: readonly T[],
    client: string,
    now = Date.now(),
  ): T | undefined {
    for (const c of candidates) this.#forgetRefusedValue(spec.provider, c);
    let usable = candidates.filter((c) => this.usable(spec.provider, c.id, now));
    // Credentials the upstream refused (401) are the last resort, not a dead end: with nothing
    // else left the request still goes out, and the provider's own answer reaches the client.
    if (usable.length === 0)
      usable = candidates.filter((c) => this.get(spec.provider, c.id).state === "invalid");
    if (usable.length === 0) return undefined;
    let chosen: T | undefined;
    const affinityKey = `${spec.provider}\0${client}`;
    if (spec.affinity === "client") {
      const pinned = this.#affinity.get(affinityKey);
      chosen = usable.find((c) => c.id === pinned);
    }
    if (chosen === undefined) {
      switch (spec.strategy) {
        case "fill_first":
          chosen = usable[0];
          break;
        case "round_robin": {
          const next = this.#cursor.get(spec.provider) ?? 0;
          chosen = usable[next % usable.length];
          this.#cursor.set(spec.provider, next + 1);
          break;
        }
        case "least_used":
          chosen = usable.reduce((a, b) =>
            this.get(spec.provider, b.id).requests < this.get(spec.provider, a.id).requests ? b : a,
          );
          break;
      }
    }
    if (chosen !== undefined) {
      if (spec.affinity === "client") this.#affinity.set(affinityKey, chosen.id);
      const s = this.get(spec.provider, chosen.id);
      s.requests++;
      s.lastUsed = now;
      this.#changed(COUNTER_SAVE_DELAY_MS);
    }
    return chosen;
  }

  /** The earliest time a marked credential of `ids` comes back (epoch ms), if any will. */
  earliestReset(provider: string, ids: readonly string[]): number | undefined {
    let earliest: number | undefined;
    for (const id of ids) {
      const s = this.get(provider, id);
      if (s.state === "usage_limit_reached" && s.until !== undefined) {
        earliest = earliest === undefined ? s.until : Math.min(earliest, s.until);
      }
    }
    return earliest;
  }

  /** Sends every mark made from now on to `mirror` as well (fleet mode). */
  mirrorTo(mirror: MarkMirror): void {
    this.#mirror = mirror;
  }

  /** The marks in force now, to publish again (a fleet store that came back empty). */
  marks(now = Date.now()): { provider: string; id: string; mark: SharedMark }[] {
    const out: { provider: string; id: string; mark: SharedMark }[] = [];
    for (const [provider, map] of this.#states) {
      for (const [id, s] of map) {
        this.#expire(s, now);
        if (s.state !== "ok") out.push({ provider, id, mark: sharedMark(s) });
      }
    }
    return out;
  }

  /**
   * Applies a mark another broker made (the fleet's store). Extend-only, like a local mark: a
   * usage mark never shortens one held here and never overrides a refusal. Not sent back to the
   * mirror.
   */
  merge(provider: string, id: string, mark: SharedMark, now = Date.now()): void {
    // Made before a reset known here: a copy from before it (a replayed value), not taken in
    // (decision 137). A mark of an older version has no time and counts as that old.
    const resetAt = this.resetAt(provider, id);
    if (resetAt !== undefined && (mark.markedAt ?? 0) <= resetAt) return;
    if (this.#apply(provider, id, mark, now, mark.markedAt ?? now)) this.#changed();
  }

  /**
   * Applies a reset made by another broker (or `auth reset` against the fleet) at `at`: marks
   * made before it are cleared, later ones kept. Nothing happens for one already known.
   */
  mergeReset(provider: string, id: string | undefined, at = Date.now()): void {
    if ((this.#resets.get(provider)?.get(id ?? "*") ?? -1) >= at) return;
    this.#clear(provider, id, at);
  }

  /** Marks one credential out of quota until `until`; a later mark only ever extends it. */
  markUsageLimit(provider: string, id: string, until: number, reason: string): CredentialState {
    const s = this.get(provider, id);
    if (s.state === "invalid") return s;
    const held = s.state === "ok" ? undefined : sharedMark(s);
    const kept = mergeMark(held, { state: "usage_limit_reached", until }, Date.now());
    s.until = kept?.until ?? until;
    s.state = "usage_limit_reached";
    s.markedAt = Date.now();
    s.reason = reason;
    s.marks++;
    this.#unpin(provider, id);
    this.#saveDurably();
    this.#mirror?.mark(provider, id, sharedMark(s));
    return s;
  }

  /** Marks one credential rejected by the upstream (401/403) until it is reset. */
  markInvalid(provider: string, id: string, reason: string, fingerprint?: string): CredentialState {
    const s = this.get(provider, id);
    s.state = "invalid";
    delete s.until;
    s.reason = reason;
    if (fingerprint !== undefined) s.fingerprint = fingerprint;
    s.markedAt = Date.now();
    s.marks++;
    this.#unpin(provider, id);
    this.#saveDurably();
    this.#mirror?.mark(provider, id, sharedMark(s));
    return s;
  }

  /**
   * A refused credential whose value has since changed (rotated, fixed, an OAuth login
   * refreshed) is usable again. Cleared as a reset of that credential is, so that the next
   * write, which first takes in the file's marks (this one among them), keeps it cleared.
   */
  #forgetRefusedValue(provider: string, member: PoolMember): void {
    const s = this.get(provider, member.id);
    if (
      s.state === "invalid" &&
      s.fingerprint !== undefined &&
      member.fingerprint !== undefined &&
      s.fingerprint !== member.fingerprint
    ) {
      this.#clear(provider, member.id, Date.now());
    }
  }

  /** Clears the marks of a provider's credentials (all, or one). Returns the ids cleared. */
  reset(provider: string, id?: string): string[] {
    const at = Date.now();
    const cleared = this.#clear(provider, id, at);
    this.#mirror?.reset(provider, id, at);
    return cleared;
  }

  #clear(provider: string, id: string | undefined, at: number): string[] {
    // Remembered (and written) so that another process on the home clears its copy too.
    let resets = this.#resets.get(provider);
    if (resets === undefined) {
      resets = new Map();
      this.#resets.set(provider, resets);
    }
    resets.set(id ?? "*", at);
    this.#changed();
    const map = this.#states.get(provider);
    if (map === undefined) return [];
    const cleared: string[] = [];
    for (const [cid, s] of map) {
      if (id !== undefined && cid !== id) continue;
      // A mark made after the reset (one received late) stays.
      if (s.state !== "ok" && (s.markedAt ?? 0) > at) continue;
      if (s.state !== "ok") cleared.push(cid);
      clearMark(s);
    }
    return cleared;
  }

  #unpin(provider: string, id: string): void {
    for (const [key, pinned] of this.#affinity) {
      if (pinned === id && key.startsWith(`${provider}\0`)) this.#affinity.delete(key);
    }
  }

  snapshot(): Record<string, Record<string, CredentialState>> {
    const now = Date.now();
    const out: Record<string, Record<string, CredentialState>> = {};
    for (const [provider, map] of this.#states) {
      out[provider] = {};
      for (const [id, s] of map) {
        this.#expire(s, now);
        out[provider][id] = { ...s };
      }
    }
    return out;
  }

  /**
   * Schedules a write. Expiries and refused values forgotten go to disk within
   * MARK_SAVE_DELAY_MS (marks are written at once, see `durable()`); request counters
   * ride along, or are written after COUNTER_SAVE_DELAY_MS (they only feed `status`). The
   * in-memory state is authoritative at once either way.
   */
  #changed(delay = MARK_SAVE_DELAY_MS): void {
    this.#dirty = true;
    if (this.#saveTimer !== undefined && this.#saveDue <= Date.now() + delay) return;
    clearTimeout(this.#saveTimer);
    this.#saveDue = Date.now() + delay;
    this.#saveTimer = setTimeout(() => {
      this.#saveTimer = undefined;
      this.flush();
    }, delay);
    this.#saveTimer.unref();
  }

  /**
   * Resolves when every mark made so far is on disk (fsync'd). Already resolved when no write
   * is pending, so a caller can await it after any request at no cost.
   */
  durable(): Promise<void> {
    return this.#lastWrite;
  }

  /** Starts (or joins) a durable write of the whole state, after the one running, if any. */
  #saveDurably(): void {
    this.#dirty = true;
    if (this.#queued !== undefined) return;
    const write = this.#lastWrite.then(async () => {
      this.#queued = undefined;
      if (!this.#dirty) return;
      this.#dirty = false;
      clearTimeout(this.#saveTimer);
      this.#saveTimer = undefined;
      const seq = ++this.#snapshots;
      try {
        const written = await this.#file.write(
          (disk) => this.#merged(disk),
          () => this.#onDisk < seq,
        );
        if (written) this.#onDisk = seq;
      } catch (err) {
        this.#dirty = true;
        this.#warn(`cannot write ${this.#file.path}: ${(err as Error).message}`);
      }
    });
    this.#queued = write;
    this.#lastWrite = write;
  }

  /** What to write over `disk`: its marks and resets taken in first, so none is lost. */
  #merged(disk: PoolData | undefined): string {
    if (disk !== undefined) this.absorb(disk);
    const resets: Record<string, Record<string, number>> = {};
    for (const [provider, ids] of this.#resets) resets[provider] = Object.fromEntries(ids);
    return `${JSON.stringify({ version: STATE_VERSION, providers: this.snapshot(), resets }, null, 1)}\n`;
  }

  /** Writes the state now (on shutdown, after resets, and for counters). */
  flush(): void {
    if (!this.#dirty) return;
    this.#dirty = false;
    clearTimeout(this.#saveTimer);
    this.#saveTimer = undefined;
    try {
      const seq = ++this.#snapshots;
      if (this.#file.writeSync((disk) => this.#merged(disk))) this.#onDisk = seq;
      // Another write holds the lock (this process's own durable one, or another process's):
      // this one follows it.
      else this.#saveDurably();
    } catch (err) {
      this.#dirty = true;
      this.#warn(`cannot write ${this.#file.path}: ${(err as Error).message}`);
    }
  }
}

function clearMark(s: CredentialState): void {
  s.state = "ok";
  delete s.until;
  delete s.reason;
  delete s.fingerprint;
  delete s.markedAt;
}

function sharedMark(s: CredentialState): SharedMark {
  return {
    state: s.state === "invalid" ? "invalid" : "usage_limit_reached",
    ...(s.until === undefined ? {} : { until: s.until }),
    ...(s.reason === undefined ? {} : { reason: s.reason }),
    ...(s.fingerprint === undefined ? {} : { fingerprint: s.fingerprint }),
    ...(s.markedAt === undefined ? {} : { markedAt: s.markedAt }),
  };
}

/** Reads the persisted pool state without a broker (for `status` when none runs). */
export function readPoolState(home: string): Record<string, Record<string, CredentialState>> {
  try {
    const data = JSON.parse(readFileSync(join(home, "state", "pools.json"), "utf8")) as {
      providers?: Record<string, Record<string, CredentialState>>;
    };
    return data.providers ?? {};
  } catch {
    return {};
  }
}
