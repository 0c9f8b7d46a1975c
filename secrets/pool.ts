// Credential pools: which credential of a provider a request uses, and what each credential's
// state is. A quota answer marks only the credential that got it; a mark only ever extends its
// deadline; a mark whose time has come is dropped, so the credential is tried again. State
// lives in memory and is written to `$KEYBROKER_HOME/state/pools.json` (atomic, 0600).
//
// A mark must survive a crash (SPEC §7): `markUsageLimit` / `markInvalid` start a durable write
// (temporary file, fsync, rename, fsync of the folder) at once, and `durable()` resolves when it
// is done; the pool's caller awaits it before retrying on another credential or answering. A
// request that marks nothing touches no disk: counters ride along, or are written later.
import { existsSync, readFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import { ensurePrivateDir, writeFileAtomic, writeFileDurable } from "../core/fs.js";
import type { PoolStrategy } from "../rules/types.js";

export type CredentialStateName = "ok" | "usage_limit_reached" | "invalid";

export interface CredentialState {
  state: CredentialStateName;
  /** Epoch ms when a `usage_limit_reached` mark ends. */
  until?: number;
  /** Why it was marked (status code and error type; never a value). */
  reason?: string;
  /** For `invalid`: the fingerprint of the value that was refused. */
  fingerprint?: string;
  requests: number;
  marks: number;
  lastUsed?: number;
}

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

/** A mark as the brokers of a fleet share it (SPEC §17): no counters, no local pins. */
export interface SharedMark {
  readonly state: "usage_limit_reached" | "invalid";
  readonly until?: number;
  readonly reason?: string;
  readonly fingerprint?: string;
}

/** Where marks made here go besides the home (the fleet's store); called after the local change. */
export interface PoolMirror {
  mark(provider: string, id: string, mark: SharedMark): void;
  reset(provider: string, id: string | undefined): void;
}

const STATE_VERSION = 1;
const MARK_SAVE_DELAY_MS = 200;
const COUNTER_SAVE_DELAY_MS = 10_000;

export class PoolState {
  readonly #path: string;
  readonly #warn: (message: string) => void;
  /** provider → credential id → state */
  readonly #states = new Map<string, Map<string, CredentialState>>();
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
  #mirror: PoolMirror | undefined;

  constructor(home: string, warn: (message: string) => void = () => {}) {
    const dir = join(home, "state");
    ensurePrivateDir(dir);
    this.#path = join(dir, "pools.json");
    this.#warn = warn;
    this.#load();
  }

  #load(): void {
    if (!existsSync(this.#path)) return;
    try {
      const data = JSON.parse(readFileSync(this.#path, "utf8")) as {
        version?: number;
        providers?: Record<string, Record<string, CredentialState>>;
      };
      if (data.version !== STATE_VERSION || typeof data.providers !== "object" || data.providers === null) {
        throw new Error("unexpected layout");
      }
      for (const [provider, creds] of Object.entries(data.providers)) {
        const map = new Map<string, CredentialState>();
        for (const [id, s] of Object.entries(creds)) {
          if (!["ok", "usage_limit_reached", "invalid"].includes(s.state)) continue;
          map.set(id, {
            state: s.state,
            ...(typeof s.until === "number" ? { until: s.until } : {}),
            ...(typeof s.reason === "string" ? { reason: s.reason } : {}),
            ...(typeof s.fingerprint === "string" ? { fingerprint: s.fingerprint } : {}),
            requests: Number(s.requests) || 0,
            marks: Number(s.marks) || 0,
            ...(typeof s.lastUsed === "number" ? { lastUsed: s.lastUsed } : {}),
          });
        }
        this.#states.set(provider, map);
      }
    } catch (err) {
      const aside = `${this.#path}.corrupt-${Date.now()}`;
      try {
        renameSync(this.#path, aside);
      } catch {
        // nothing more to do: we start empty either way
      }
      this.#warn(
        `the pool state file was unreadable (${(err as Error).message}); moved it to ${aside} and started with no marks`,
      );
    }
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
  mirrorTo(mirror: PoolMirror): void {
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
   * Applies a mark another broker made. Extend-only, like a local mark: a usage mark never
   * shortens one held here and never overrides a refusal. Not sent back to the mirror.
   */
  merge(provider: string, id: string, mark: SharedMark, now = Date.now()): void {
    const s = this.get(provider, id);
    if (mark.state === "invalid") {
      if (s.state === "invalid" && s.fingerprint === mark.fingerprint) return;
      s.state = "invalid";
      delete s.until;
      if (mark.fingerprint === undefined) delete s.fingerprint;
      else s.fingerprint = mark.fingerprint;
    } else {
      if (s.state === "invalid" || mark.until === undefined || mark.until <= now) return;
      if (s.state === "usage_limit_reached" && s.until !== undefined && s.until >= mark.until) return;
      s.state = "usage_limit_reached";
      s.until = mark.until;
    }
    if (mark.reason === undefined) delete s.reason;
    else s.reason = mark.reason;
    this.#unpin(provider, id);
    this.#changed();
  }

  /** Applies a reset made by another broker (or `auth reset` against the fleet). */
  mergeReset(provider: string, id: string | undefined): void {
    this.#clear(provider, id);
  }

  /** Marks one credential out of quota until `until`; a later mark only ever extends it. */
  markUsageLimit(provider: string, id: string, until: number, reason: string): CredentialState {
    const s = this.get(provider, id);
    if (s.state === "invalid") return s;
    if (s.state !== "usage_limit_reached" || s.until === undefined || until > s.until) s.until = until;
    s.state = "usage_limit_reached";
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
    s.marks++;
    this.#unpin(provider, id);
    this.#saveDurably();
    this.#mirror?.mark(provider, id, sharedMark(s));
    return s;
  }

  /** A refused credential whose value has since changed (rotated, fixed) is usable again. */
  #forgetRefusedValue(provider: string, member: PoolMember): void {
    const s = this.get(provider, member.id);
    if (
      s.state === "invalid" &&
      s.fingerprint !== undefined &&
      member.fingerprint !== undefined &&
      s.fingerprint !== member.fingerprint
    ) {
      s.state = "ok";
      delete s.reason;
      delete s.fingerprint;
      this.#changed();
    }
  }

  /** Clears the marks of a provider's credentials (all, or one). Returns the ids cleared. */
  reset(provider: string, id?: string): string[] {
    const cleared = this.#clear(provider, id);
    this.#mirror?.reset(provider, id);
    return cleared;
  }

  #clear(provider: string, id: string | undefined): string[] {
    const map = this.#states.get(provider);
    if (map === undefined) return [];
    const cleared: string[] = [];
    for (const [cid, s] of map) {
      if (id !== undefined && cid !== id) continue;
      if (s.state !== "ok") cleared.push(cid);
      s.state = "ok";
      delete s.until;
      delete s.reason;
      delete s.fingerprint;
    }
    this.#changed();
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
        const written = await writeFileDurable(this.#path, this.#serialize(), {
          stillWanted: () => this.#onDisk < seq,
        });
        if (written) this.#onDisk = seq;
      } catch (err) {
        this.#dirty = true;
        this.#warn(`cannot write ${this.#path}: ${(err as Error).message}`);
      }
    });
    this.#queued = write;
    this.#lastWrite = write;
  }

  #serialize(): string {
    return JSON.stringify({ version: STATE_VERSION, providers: this.snapshot() }, null, 1) + "\n";
  }

  /** Writes the state now (on shutdown, after resets, and for counters). */
  flush(): void {
    if (!this.#dirty) return;
    this.#dirty = false;
    clearTimeout(this.#saveTimer);
    this.#saveTimer = undefined;
    try {
      const seq = ++this.#snapshots;
      writeFileAtomic(this.#path, this.#serialize());
      this.#onDisk = seq;
    } catch (err) {
      this.#dirty = true;
      this.#warn(`cannot write ${this.#path}: ${(err as Error).message}`);
    }
  }
}

function sharedMark(s: CredentialState): SharedMark {
  return {
    state: s.state === "invalid" ? "invalid" : "usage_limit_reached",
    ...(s.until === undefined ? {} : { until: s.until }),
    ...(s.reason === undefined ? {} : { reason: s.reason }),
    ...(s.fingerprint === undefined ? {} : { fingerprint: s.fingerprint }),
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
