// The audit log (docs/spec.md §12): one JSON line per decision in `$KEYBROKER_HOME/audit/audit.jsonl`,
// hash-chained, rotated at a size cap with the chain carried across files.
//
// `record()` never waits on the disk: it serializes the line, passes it through the secret
// scrubber and queues its bytes (decision 181). A background writer chains the queued lines in
// order and appends the batch with one write. `close()` (or `flush()`) waits until everything
// queued is on disk.
//
// A write is never lost in silence (docs/spec.md §12): a short write is continued; a failed one (disk
// full, …) is reported once through `onError`, its events are counted, and the first write that
// succeeds again starts with a `gap` line (how many events, first and last time) inside the
// chain, then reports through `onResume`. A torn last line found when the file is first opened
// (a crash in the middle of an append) is cut, warned about and recorded by a `gap` line too.
// While writes fail, a probe retries every PROBE_MS so the gap is closed without new traffic.
//
// Line format (audit-line.ts puts a line together): the entry's fields, then `prev` (the previous line's `hash`; 64 zeros for the
// first line ever) and `hash` = sha256 hex of the line's text up to `prev` included, closed
// with `}` — that is, of the line without its `,"hash":"…"` member. A changed line no longer
// matches its own hash; a removed, inserted or reordered line breaks the `prev` link of the line
// that follows it.
import type { FileHandle } from "node:fs/promises";
import { open, rename, stat, truncate, unlink } from "node:fs/promises";
import { basename, join } from "node:path";
import { ensurePrivateDir } from "../core/fs.js";
import { knownSecrets } from "../core/scrub.js";
import {
  AUDIT_DECISIONS,
  type AuditDecision,
  type AuditEntry,
  type AuditGap,
  type AuditHealth,
  type AuditRecord,
  SECURITY_DECISIONS,
} from "./audit-entry.js";
import { Encoded, isoTime, type LineScrubber, serialize, sha256, timeMs } from "./audit-line.js";

export {
  AUDIT_DECISIONS,
  type AuditDecision,
  type AuditEntry,
  type AuditGap,
  type AuditHealth,
  type AuditRecord,
  SECURITY_DECISIONS,
};

export interface AuditLogOptions {
  /** The files' base name: `audit` (audit.jsonl, audit.1.jsonl, …) or `security`. */
  readonly name?: AuditChain;
  /** Rotate when the current file would grow past this many bytes (default 10 MiB). */
  readonly maxBytes?: number;
  /** Rotated files kept: audit.1.jsonl (newest) … audit.<keep>.jsonl (default 5). */
  readonly keep?: number;
  /** Query parameters stripped from every entry's path, on top of each entry's own list. */
  readonly stripParams?: readonly string[];
  /** The last net: every serialized line passes through it (default: the known-secret registry). */
  readonly scrubber?: LineScrubber;
  /** Writes began to fail (disk full, …): called once, not per batch. The chain stays intact. */
  readonly onError?: (err: Error) => void;
  /** Writing works again; `gap` is what the `gap` line just written records. */
  readonly onResume?: (gap: AuditGap | undefined) => void;
  /** Something found and mended (a torn last line cut at start). */
  readonly onWarn?: (message: string) => void;
  /** How a buffer is written (tests inject short writes and failures). */
  readonly write?: (fh: FileHandle, buf: Buffer, offset: number, length: number) => Promise<number>;
}

/** The two hash chains: every decision, and the security-relevant ones kept apart (docs/spec.md §12). */
export type AuditChain = "audit" | "security";

export const DEFAULT_MAX_BYTES = 10 * 1024 * 1024;
export const DEFAULT_KEEP = 5;
export const GENESIS = "0".repeat(64);
/** How long a recorded line may wait before its batch is written. */
const BATCH_DELAY_MS = 20;
/** Bytes a batch's buffer starts with (it grows as lines are recorded). */
const QUEUE_BYTES = 16 * 1024;
/** A batch buffer bigger than this (after a burst) is not kept for the next batch. */
const SPARE_MAX_BYTES = 1024 * 1024;
/** A batch this long is written at once. */
const BATCH_LINES = 512;
/** While writes fail, how often a write is tried without new events. */
const PROBE_MS = 1000;
const HASH_SUFFIX = /,"hash":"([0-9a-f]{64})"\}$/;

export function auditDir(home: string): string {
  return join(home, "audit");
}

export function currentAuditFile(home: string, name: AuditChain = "audit"): string {
  return join(auditDir(home), `${name}.jsonl`);
}

export function rotatedAuditFile(home: string, n: number, name: AuditChain = "audit"): string {
  return join(auditDir(home), `${name}.${n}.jsonl`);
}

/** The `hash` of the last complete line of a file, or undefined when it has none. */
async function lastHashOf(path: string): Promise<string | undefined> {
  let fh: FileHandle;
  try {
    fh = await open(path, "r");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  try {
    const { size } = await fh.stat();
    let end = size;
    let tail = "";
    // Read backwards until a whole line is in hand (lines are a few hundred bytes).
    while (end > 0) {
      const len = Math.min(64 * 1024, end);
      const buf = Buffer.alloc(len);
      await fh.read(buf, 0, len, end - len);
      end -= len;
      tail = buf.toString("utf8") + tail;
      const lines = tail.split("\n").filter((l) => l !== "");
      if (lines.length >= 2 || (end === 0 && lines.length === 1)) {
        const last = lines[lines.length - 1]!;
        return HASH_SUFFIX.exec(last)?.[1] ?? sha256(last);
      }
    }
    return undefined;
  } finally {
    await fh.close();
  }
}

/** An append that stopped part-way: how many of its lines are whole on disk. */
class AppendError extends Error {
  readonly linesWritten: number;
  constructor(cause: unknown, linesWritten: number) {
    super((cause as Error).message, { cause });
    this.linesWritten = linesWritten;
  }
}

const defaultWrite = async (fh: FileHandle, buf: Buffer, offset: number, length: number) =>
  (await fh.write(buf, offset, length)).bytesWritten;

function addToGap(gap: AuditGap | undefined, lost: readonly number[], why: string): AuditGap | undefined {
  if (lost.length === 0) return gap;
  const times = lost.map((ms) => isoTime(ms)).sort();
  const first = gap === undefined || times[0]! < gap.first ? times[0]! : gap.first;
  const last = gap === undefined || times.at(-1)! > gap.last ? times.at(-1)! : gap.last;
  const whys = gap === undefined || gap.why.includes(why) ? (gap?.why ?? why) : `${gap.why}; ${why}`;
  return { lost: (gap?.lost ?? 0) + lost.length, first, last, why: whys };
}

export class AuditLog {
  readonly home: string;
  readonly path: string;
  readonly #maxBytes: number;
  readonly #keep: number;
  readonly #strip: readonly string[];
  readonly #scrub: LineScrubber;
  readonly #onError: (err: Error) => void;
  readonly #onResume: (gap: AuditGap | undefined) => void;
  readonly #onWarn: (message: string) => void;
  readonly #write: (fh: FileHandle, buf: Buffer, offset: number, length: number) => Promise<number>;
  readonly #name: AuditChain;
  /** Lines recorded and not yet handed to the writer. */
  #queue = new Encoded(QUEUE_BYTES);
  /**
   * The batch before last, emptied: the queue's next buffer. Two buffers take turns (one filling,
   * one being written), rather than a new one a batch that the garbage collector would have
   * to count and free.
   */
  #spare: Encoded | undefined;
  /** Set while writes fail. */
  #failure: { since: number; error: string } | undefined;
  #gap: AuditGap | undefined;
  /** The file was opened once by this process: a torn line found later is our own failed write. */
  #opened = false;
  #probe: NodeJS.Timeout | undefined;
  #pump: Promise<void> | undefined;
  #fh: FileHandle | undefined;
  #ino = 0;
  #size = 0;
  #lastHash = GENESIS;
  #flushing = false;

  constructor(home: string, opts: AuditLogOptions = {}) {
    this.home = home;
    this.#name = opts.name ?? "audit";
    this.path = currentAuditFile(home, this.#name);
    this.#maxBytes = opts.maxBytes ?? DEFAULT_MAX_BYTES;
    this.#keep = Math.max(0, opts.keep ?? DEFAULT_KEEP);
    this.#strip = opts.stripParams ?? [];
    this.#scrub = opts.scrubber ?? knownSecrets;
    this.#onError =
      opts.onError ??
      ((err) => process.stderr.write(knownSecrets.scrub(`keybroker: audit log: ${err.message}\n`)));
    this.#onResume = opts.onResume ?? (() => {});
    this.#onWarn =
      opts.onWarn ?? ((message) => process.stderr.write(knownSecrets.scrub(`keybroker: ${message}\n`)));
    this.#write = opts.write ?? defaultWrite;
    ensurePrivateDir(auditDir(home));
  }

  /**
   * Queues one decision. Synchronous and cheap: the disk is written in the background, in
   * batches at most BATCH_DELAY_MS apart (under load, one append per batch, not per request).
   */
  record(entry: AuditEntry): void {
    const at = Date.now();
    this.#queue.add(serialize(entry, at, this.#strip, this.#scrub), timeMs(entry.time, at));
    this.#pump ??= new Promise<void>((resolve) => {
      const wait = this.#queue.lines >= BATCH_LINES ? 0 : BATCH_DELAY_MS;
      setTimeout(resolve, wait);
    }).then(() => this.#drain());
  }

  /** False while writes fail (until a write succeeds again). */
  get writable(): boolean {
    return this.#failure === undefined;
  }

  health(): AuditHealth {
    const f = this.#failure;
    return {
      file: this.path,
      writing: f === undefined,
      ...(f === undefined ? {} : { failingSince: new Date(f.since).toISOString(), error: f.error }),
      lost: this.#gap?.lost ?? 0,
    };
  }

  /** Entries recorded but not yet on disk. */
  get pending(): number {
    return this.#queue.lines;
  }

  /** Resolves when everything recorded so far is on disk. */
  async flush(): Promise<void> {
    this.#flushing = true;
    try {
      while (this.#pump !== undefined) await this.#pump;
    } finally {
      this.#flushing = false;
    }
  }

  /** Flushes and closes the file. A later `record()` opens it again. */
  async close(): Promise<void> {
    clearTimeout(this.#probe);
    this.#probe = undefined;
    await this.flush();
    const fh = this.#fh;
    this.#fh = undefined;
    await fh?.close();
  }

  async #drain(probe = false): Promise<void> {
    try {
      // A probe writes at least the pending `gap` line, with or without new events.
      while (this.#queue.lines > 0 || probe) {
        probe = false;
        const batch = this.#queue;
        this.#queue = this.#spare ?? new Encoded(QUEUE_BYTES);
        this.#spare = undefined;
        await this.#writeBatch(batch);
        batch.reset();
        // A burst's big buffer is let go rather than kept.
        if (batch.buf.length <= SPARE_MAX_BYTES) this.#spare = batch;
        // Let the next batch grow (one append for many lines), unless it is big already or a
        // flush is waiting for it.
        if (this.#queue.lines > 0 && this.#queue.lines < BATCH_LINES && !this.#flushing) {
          await new Promise((resolve) => setTimeout(resolve, BATCH_DELAY_MS));
        }
      }
    } finally {
      this.#pump = undefined;
    }
  }

  async #writeBatch(batch: Encoded): Promise<void> {
    let gap: Encoded | undefined;
    let gapWritten = false;
    let done = 0;
    try {
      await this.#sync();
      if (this.#gap !== undefined) {
        const g = this.#gap;
        const entry: AuditEntry = {
          decision: "gap",
          lost: g.lost,
          first: g.first,
          last: g.last,
          reason: `${g.lost} event(s) could not be written to ${basename(this.path)}: ${g.why}`,
        };
        const at = Date.now();
        gap = new Encoded(1024);
        gap.add(serialize(entry, at, this.#strip, this.#scrub), at);
        gapWritten = (await this.#chainAndAppend(gap)) > 0;
      }
      done = await this.#chainAndAppend(batch);
    } catch (err) {
      if (err instanceof AppendError) {
        if (gap !== undefined && !gapWritten) gapWritten = err.linesWritten > 0;
        else done += err.linesWritten;
      }
      // Reopen before the next batch, so the chain resumes from what the disk really holds.
      const fh = this.#fh;
      this.#fh = undefined;
      await fh?.close().catch(() => {});
      if (gapWritten) this.#gap = undefined;
      const message = (err as Error).message;
      this.#gap = addToGap(this.#gap, batch.times.slice(done), message);
      if (this.#failure === undefined) {
        this.#failure = { since: Date.now(), error: message };
        this.#onError(
          new Error(
            `cannot write ${this.path}: ${message}. Events are counted; a gap line will record them when writing resumes`,
            { cause: err },
          ),
        );
      } else this.#failure.error = message;
      this.#scheduleProbe();
      return;
    }
    const recorded = gap !== undefined ? this.#gap : undefined;
    if (gap !== undefined) this.#gap = undefined;
    if (this.#failure !== undefined) {
      this.#failure = undefined;
      clearTimeout(this.#probe);
      this.#probe = undefined;
      this.#onResume(recorded);
    }
  }

  #scheduleProbe(): void {
    if (this.#probe !== undefined) return;
    this.#probe = setTimeout(() => {
      this.#probe = undefined;
      if (this.#failure === undefined) return;
      this.#pump ??= this.#drain(true);
    }, PROBE_MS);
    this.#probe.unref();
  }

  /**
   * Chains `enc`'s lines on to the file's last hash and appends them, rotating first when a line
   * would take the file past its cap. Returns how many lines were written.
   */
  async #chainAndAppend(enc: Encoded): Promise<number> {
    let done = 0;
    // Bytes of `enc` before `from` are on disk already (appended before a rotation).
    let from = 0;
    try {
      for (let i = 0; i < enc.lines; i++) {
        const start = i === 0 ? 0 : enc.ends[i - 1]!;
        const buffered = start - from;
        if (this.#size + buffered > 0 && this.#size + buffered + (enc.ends[i]! - start) > this.#maxBytes) {
          done += await this.#append(enc, from, start);
          from = start;
          await this.#rotate();
        }
        this.#lastHash = enc.chain(i, this.#lastHash);
      }
      return done + (await this.#append(enc, from, enc.at));
    } catch (err) {
      // The lines already on disk count, whatever failed after them (a rotation, an append).
      if (err instanceof AppendError) throw new AppendError(err.cause, done + err.linesWritten);
      throw new AppendError(err, done);
    }
  }

  /** Writes `enc`'s bytes from `from` to `to` (whole lines); returns how many lines they hold. */
  async #append(enc: Encoded, from: number, to: number): Promise<number> {
    const lines = enc.ends.filter((end) => end > from && end <= to).length;
    if (lines === 0) return 0;
    // A short write (a nearly full disk) is continued from where it stopped.
    let off = from;
    try {
      while (off < to) {
        const n = await this.#write(this.#fh!, enc.buf, off, to - off);
        if (n <= 0) throw new Error(`short write: ${off - from} of ${to - from} bytes written`);
        off += n;
      }
    } catch (err) {
      this.#size += off - from;
      throw new AppendError(err, enc.ends.filter((end) => end > from && end <= off).length);
    }
    this.#size += to - from;
    return lines;
  }

  /**
   * Opens the current file when needed, and re-reads where the chain stands when the file is
   * not the one we last wrote (first open, restart, another process appended or rotated).
   */
  async #sync(): Promise<void> {
    let st: { ino: number; size: number } | undefined;
    try {
      st = await stat(this.path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    if (this.#fh !== undefined && st !== undefined && st.ino === this.#ino && st.size === this.#size) return;
    await this.#fh?.close();
    this.#fh = undefined;
    if (st !== undefined && st.size > 0) {
      const cut = await this.#dropPartialLine(st.size);
      if (cut > 0 && !this.#opened) {
        // Found at start: a crash in the middle of an append. Reported, and recorded in the chain.
        const why = `a torn last line (${cut} bytes, no newline) was cut from ${basename(this.path)} at start`;
        this.#onWarn(`audit log: ${why}; a gap line records it`);
        this.#gap = addToGap(this.#gap, [Date.now()], why);
      }
    }
    const fh = await open(this.path, "a", 0o600);
    try {
      await fh.chmod(0o600);
      const now = await fh.stat();
      this.#ino = now.ino;
      this.#size = now.size;
      this.#lastHash =
        (await lastHashOf(this.path)) ??
        (await lastHashOf(rotatedAuditFile(this.home, 1, this.#name))) ??
        GENESIS;
    } catch (err) {
      await fh.close();
      throw err;
    }
    this.#fh = fh;
    this.#opened = true;
  }

  /**
   * A crash or a failed write in the middle of an append leaves a line without its newline: cut
   * it off. Returns how many bytes were cut.
   */
  async #dropPartialLine(size: number): Promise<number> {
    const fh = await open(this.path, "r");
    let keep = size;
    try {
      const last = Buffer.alloc(1);
      await fh.read(last, 0, 1, size - 1);
      if (last[0] === 0x0a) return 0;
      const len = Math.min(size, 1024 * 1024);
      const buf = Buffer.alloc(len);
      await fh.read(buf, 0, len, size - len);
      const nl = buf.lastIndexOf(0x0a);
      keep = nl === -1 ? (len === size ? 0 : size) : size - len + nl + 1;
    } finally {
      await fh.close();
    }
    if (keep < size) await truncate(this.path, keep);
    return size - keep;
  }

  /** audit.jsonl → audit.1.jsonl → … → audit.<keep>.jsonl → removed. */
  async #rotate(): Promise<void> {
    await this.#fh?.close();
    this.#fh = undefined;
    const ignoreMissing = (err: NodeJS.ErrnoException) => {
      if (err.code !== "ENOENT") throw err;
    };
    if (this.#keep === 0) {
      await unlink(this.path).catch(ignoreMissing);
    } else {
      const rotated = (n: number) => rotatedAuditFile(this.home, n, this.#name);
      await unlink(rotated(this.#keep)).catch(ignoreMissing);
      for (let n = this.#keep - 1; n >= 1; n--) {
        await rename(rotated(n), rotated(n + 1)).catch(ignoreMissing);
      }
      await rename(this.path, rotated(1));
    }
    const fh = await open(this.path, "a", 0o600);
    await fh.chmod(0o600);
    this.#ino = (await fh.stat()).ino;
    this.#size = 0;
    this.#fh = fh;
  }
}
