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
// Line format: the entry's fields, then `prev` (the previous line's `hash`; 64 zeros for the
// first line ever) and `hash` = sha256 hex of the line's text up to `prev` included, closed
// with `}` — that is, of the line without its `,"hash":"…"` member. A changed line no longer
// matches its own hash; a removed, inserted or reordered line breaks the `prev` link of the line
// that follows it.
import { hash as oneShotHash } from "node:crypto";
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
  readonly scrub?: (line: string) => string;
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
const REDACTED_PARAM = "[REDACTED]";

export function auditDir(home: string): string {
  return join(home, "audit");
}

export function currentAuditFile(home: string, name: AuditChain = "audit"): string {
  return join(auditDir(home), `${name}.jsonl`);
}

export function rotatedAuditFile(home: string, n: number, name: AuditChain = "audit"): string {
  return join(auditDir(home), `${name}.${n}.jsonl`);
}

export function sha256(text: string): string {
  return oneShotHash("sha256", text, "hex");
}

/**
 * Removes the values of the named query parameters: `/v1/x?key=abc&alt=sse` with `["key"]`
 * gives `/v1/x?key=[REDACTED]&alt=sse`. Names are compared after URL-decoding.
 */
export function stripQuery(path: string, params: readonly string[]): string {
  const q = path.indexOf("?");
  if (q === -1 || params.length === 0) return path;
  const hashAt = path.indexOf("#", q);
  const query = path.slice(q + 1, hashAt === -1 ? undefined : hashAt);
  let changed = false;
  const parts = query.split("&").map((part) => {
    const eq = part.indexOf("=");
    const rawName = eq === -1 ? part : part.slice(0, eq);
    let name = rawName;
    try {
      name = decodeURIComponent(rawName.replace(/\+/g, " "));
    } catch {
      // A malformed escape: compare the raw name.
    }
    if (eq === -1 || !params.includes(name)) return part;
    changed = true;
    return `${rawName}=${REDACTED_PARAM}`;
  });
  if (!changed) return path;
  return `${path.slice(0, q)}?${parts.join("&")}${hashAt === -1 ? "" : path.slice(hashAt)}`;
}

let lastMs = Number.NaN;
let lastIso = "";
let lastSecond = Number.NaN;
/** `lastSecond` formatted up to its `.`: "2026-11-27T16:24:39." */
let secondPrefix = "";

function isoTime(t: Date | number | string): string {
  if (typeof t === "string") return t;
  if (typeof t !== "number") return t.toISOString();
  if (!Number.isInteger(t)) return new Date(t).toISOString();
  // Under load, many lines share a millisecond: format each millisecond once, and each second's
  // date and time once (a Date and its formatting cost more than the rest of a line's fields).
  if (t !== lastMs) {
    const second = Math.floor(t / 1000);
    if (second !== lastSecond) {
      lastSecond = second;
      secondPrefix = new Date(second * 1000).toISOString().slice(0, -4);
    }
    const ms = t - second * 1000;
    lastMs = t;
    lastIso = `${secondPrefix}${ms < 10 ? "00" : ms < 100 ? "0" : ""}${ms}Z`;
  }
  return lastIso;
}

/**
 * What JSON.stringify escapes in a string: `"`, `\\`, control characters and (lone) surrogates.
 * A string without any of them is its own JSON text between quotes.
 */
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/** A field's JSON text, the same as JSON.stringify gives (exported for its test). */
export function jsonValue(value: string | number): string {
  if (typeof value === "string") return NEEDS_ESCAPE.test(value) ? JSON.stringify(value) : `"${value}"`;
  return typeof value === "number" && Number.isFinite(value) ? `${value}` : (JSON.stringify(value) ?? "null");
}

/**
 * The line's text without `prev` and `hash`, fields in a fixed order and absent ones left out:
 * what JSON.stringify would give for them, put together directly (a field's object and its
 * generic serialization cost a request more than the rest of its line, decision 181).
 */
export function serialize(
  entry: AuditEntry,
  at: number,
  strip: readonly string[],
  scrub: (s: string) => string,
): string {
  let s = `{"time":${jsonValue(isoTime(entry.time ?? at))},"decision":${jsonValue(entry.decision)}`;
  if (entry.client !== undefined) s += `,"client":${jsonValue(entry.client)}`;
  if (entry.launch !== undefined) s += `,"launch":${jsonValue(entry.launch)}`;
  if (entry.provider !== undefined) s += `,"provider":${jsonValue(entry.provider)}`;
  if (entry.credential !== undefined) s += `,"credential":${jsonValue(entry.credential)}`;
  if (entry.fingerprint !== undefined) s += `,"fingerprint":${jsonValue(entry.fingerprint)}`;
  if (entry.method !== undefined) s += `,"method":${jsonValue(entry.method)}`;
  if (entry.host !== undefined) s += `,"host":${jsonValue(entry.host)}`;
  if (entry.path !== undefined) {
    const params = entry.stripParams === undefined ? strip : [...strip, ...entry.stripParams];
    s += `,"path":${jsonValue(stripQuery(entry.path, params))}`;
  }
  if (entry.status !== undefined) s += `,"status":${jsonValue(entry.status)}`;
  if (entry.bytesIn !== undefined) s += `,"bytes_in":${jsonValue(entry.bytesIn)}`;
  if (entry.bytesOut !== undefined) s += `,"bytes_out":${jsonValue(entry.bytesOut)}`;
  if (entry.durationMs !== undefined)
    s += `,"duration_ms":${jsonValue(Math.round(entry.durationMs * 1000) / 1000)}`;
  if (entry.code !== undefined) s += `,"code":${jsonValue(entry.code)}`;
  if (entry.reason !== undefined) s += `,"reason":${jsonValue(entry.reason)}`;
  if (entry.lost !== undefined) s += `,"lost":${jsonValue(entry.lost)}`;
  if (entry.first !== undefined) s += `,"first":${jsonValue(entry.first)}`;
  if (entry.last !== undefined) s += `,"last":${jsonValue(entry.last)}`;
  // Scrubbed before `prev` is added, so a (short) secret can never corrupt the chain's hex.
  return scrub(`${s}}`);
}

/** After a line's text: `,"prev":"<64 hex>","hash":"<64 hex>"}` and its newline. */
const PREV_MEMBER = ',"prev":"';
const HASH_MEMBER = '","hash":"';
const CHAIN_BYTES = PREV_MEMBER.length + 64 + HASH_MEMBER.length + 64 + 3;
/** From a line's end back to its `prev` value. */
const PREV_FROM_END = 64 + HASH_MEMBER.length + 64 + 3;
const HASH_HOLE = "0".repeat(64);

/** An entry's time in milliseconds, for a `gap` line's first and last. */
function timeMs(time: Date | number | string | undefined, at: number): number {
  if (time === undefined) return at;
  const ms = typeof time === "number" ? time : typeof time === "string" ? Date.parse(time) : time.getTime();
  return Number.isNaN(ms) ? at : ms;
}

/**
 * Lines recorded and not yet written, encoded when they are recorded, into the buffer that is
 * written: a line waits for its batch as bytes outside the JavaScript heap, not as an entry and
 * its strings that every young-generation collection until then would copy (decision 181). Each
 * line is laid out whole, with room for `prev` and `hash`; `chain()` fills them in where they
 * lie when the batch is written and the previous hash is known.
 */
class Encoded {
  buf: Buffer;
  /** Bytes used. */
  at = 0;
  /** Where each line ends (after its newline). */
  readonly ends: number[] = [];
  /** Each line's time in milliseconds (for a `gap` line, should its write fail). */
  readonly times: number[] = [];

  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }

  get lines(): number {
    return this.ends.length;
  }

  /** Empties it for the next batch, keeping its buffer. */
  reset(): void {
    this.at = 0;
    this.ends.length = 0;
    this.times.length = 0;
  }

  /** Adds `body` (a serialized line, ending in `}`), with holes for `prev` and `hash`. */
  add(body: string, time: number): void {
    // A UTF-16 code unit is at most 3 bytes of UTF-8.
    const need = this.at + body.length * 3 + CHAIN_BYTES;
    if (need > this.buf.length) {
      const bigger = Buffer.allocUnsafe(Math.max(need, this.buf.length * 2));
      this.buf.copy(bigger, 0, 0, this.at);
      this.buf = bigger;
    }
    const buf = this.buf;
    // The `}` that closes `body` is written over by the `prev` member.
    let at = this.at + buf.write(body, this.at) - 1;
    at += buf.write(PREV_MEMBER, at, "latin1");
    at += buf.write(HASH_HOLE, at, "latin1");
    at += buf.write(HASH_MEMBER, at, "latin1");
    at += buf.write(HASH_HOLE, at, "latin1");
    buf[at++] = 0x22; // "
    buf[at++] = 0x7d; // }
    buf[at++] = 0x0a;
    this.at = at;
    this.ends.push(at);
    this.times.push(time);
  }

  /**
   * Chains line `i` to `prev`: writes `prev` into it, and the sha256 of its text up to `prev`,
   * closed with `}` (docs/spec.md §12), as its `hash`. Returns the hash.
   */
  chain(i: number, prev: string): string {
    const buf = this.buf;
    const start = i === 0 ? 0 : this.ends[i - 1]!;
    const prevAt = this.ends[i]! - PREV_FROM_END;
    buf.write(prev, prevAt, "latin1");
    // Hashed as `…"prev":"<prev>"}`: the `,` after the closing quote stands in as `}` meanwhile.
    const comma = prevAt + 65;
    buf[comma] = 0x7d;
    const hash = oneShotHash("sha256", buf.subarray(start, comma + 1), "hex");
    buf[comma] = 0x2c;
    buf.write(hash, comma + HASH_MEMBER.length - 1, "latin1");
    return hash;
  }
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
  readonly #scrub: (line: string) => string;
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
    this.#scrub = opts.scrub ?? ((line) => knownSecrets.scrub(line));
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
