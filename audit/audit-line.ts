// One audit line (docs/spec.md §12): its text, put together by hand from an entry's fields
// (decision 181), and its bytes, encoded once into the batch buffer the log writes, with `prev`
// and `hash` filled in where they lie when the line is chained. audit-log.ts queues, chains and
// writes the lines; audit-verify.ts reads them back.
import { hash as oneShotHash } from "node:crypto";
import type { Scrubber } from "../core/scrub.js";
import type { AuditEntry } from "./audit-entry.js";

/** What a line passes through last: the known-secret registry (core/scrub.ts). */
export type LineScrubber = Pick<Scrubber, "scrub" | "withinStrings" | "clean">;

/**
 * The longest run of a line's characters between two quotes that is not one of its string
 * fields: a key (`duration_ms`, 11), a number with its `:` and `,` (a JavaScript number's text
 * is at most 25 characters, as in -0.0000012345678901234567), the time (toISOString's 24, or 27
 * from the year 10000 on) or the decision (at most 18). A secret's form longer than this and
 * without a quote can only lie inside one field (decision 191).
 */
const OUTSIDE_FIELDS = 27;

const REDACTED_PARAM = "[REDACTED]";

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

export function isoTime(t: Date | number | string): string {
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
  scrubber: LineScrubber,
): string {
  let path: string | undefined;
  if (entry.path !== undefined) {
    const params = entry.stripParams === undefined ? strip : [...strip, ...entry.stripParams];
    path = stripQuery(entry.path, params);
  }
  // One look for anything to escape across the line's strings, rather than one per field: the
  // fields are quoted as they are when none needs it, which is nearly always. Every string field
  // written below must be in it: the secret search at the end looks only here too.
  const probe = `${entry.client ?? ""}${entry.launch ?? ""}${entry.provider ?? ""}${entry.credential ?? ""}${entry.fingerprint ?? ""}${entry.method ?? ""}${entry.host ?? ""}${path ?? ""}${entry.code ?? ""}${entry.reason ?? ""}`;
  // The quote looked for first: its search flattens `probe` (a concatenation) in place, where a
  // regular expression's test would have V8 flatten it through its runtime, at several times the
  // cost.
  const q = probe.indexOf('"') === -1 && !NEEDS_ESCAPE.test(probe) ? quoted : jsonValue;
  const time = isoTime(entry.time ?? at);
  const decision = jsonValue(entry.decision);
  // A time the broker formatted itself (a number, a Date) has nothing to escape.
  let s = `{"time":${typeof entry.time === "string" ? jsonValue(time) : `"${time}"`},"decision":${decision}`;
  if (entry.client !== undefined) s += `,"client":${q(entry.client)}`;
  if (entry.launch !== undefined) s += `,"launch":${q(entry.launch)}`;
  if (entry.provider !== undefined) s += `,"provider":${q(entry.provider)}`;
  if (entry.credential !== undefined) s += `,"credential":${q(entry.credential)}`;
  if (entry.fingerprint !== undefined) s += `,"fingerprint":${q(entry.fingerprint)}`;
  if (entry.method !== undefined) s += `,"method":${q(entry.method)}`;
  if (entry.host !== undefined) s += `,"host":${q(entry.host)}`;
  if (path !== undefined) s += `,"path":${q(path)}`;
  if (entry.status !== undefined) s += `,"status":${jsonValue(entry.status)}`;
  if (entry.bytesIn !== undefined) s += `,"bytes_in":${jsonValue(entry.bytesIn)}`;
  if (entry.bytesOut !== undefined) s += `,"bytes_out":${jsonValue(entry.bytesOut)}`;
  if (entry.durationMs !== undefined)
    s += `,"duration_ms":${jsonValue(Math.round(entry.durationMs * 1000) / 1000)}`;
  if (entry.code !== undefined) s += `,"code":${q(entry.code)}`;
  if (entry.reason !== undefined) s += `,"reason":${q(entry.reason)}`;
  if (entry.lost !== undefined) s += `,"lost":${jsonValue(entry.lost)}`;
  if (entry.first !== undefined) s += `,"first":${jsonValue(entry.first)}`;
  if (entry.last !== undefined) s += `,"last":${jsonValue(entry.last)}`;
  // Scrubbed before `prev` is added, so a (short) secret can never corrupt the chain's hex. When
  // every field is written as it is, the time is the broker's own, the decision's text between
  // its quotes is at most OUTSIDE_FIELDS long, and every form of every secret is longer than that
  // and without a quote, a form in the line would be in one of the fields, each of which `probe`
  // holds as written: looking there is looking at a third of the line (decision 191).
  if (
    q === quoted &&
    typeof entry.time !== "string" &&
    decision.length <= OUTSIDE_FIELDS + 2 &&
    entry.first === undefined &&
    entry.last === undefined &&
    scrubber.withinStrings(OUTSIDE_FIELDS) &&
    scrubber.clean(probe)
  )
    return `${s}}`;
  return scrubber.scrub(`${s}}`);
}

/** A string field with nothing to escape (or a number), as JSON. */
function quoted(value: string | number): string {
  return typeof value === "string" ? `"${value}"` : jsonValue(value);
}

/** After a line's text: `,"prev":"<64 hex>","hash":"<64 hex>"}` and its newline. */
const PREV_MEMBER = ',"prev":"';
const HASH_MEMBER = '","hash":"';
const CHAIN_BYTES = PREV_MEMBER.length + 64 + HASH_MEMBER.length + 64 + 3;
/** From a line's end back to its `prev` value. */
const PREV_FROM_END = 64 + HASH_MEMBER.length + 64 + 3;
const HASH_HOLE = "0".repeat(64);
/** What follows a line's text, with holes for `prev` and `hash`: copied in with one `set`. */
const TAIL = Buffer.from(`${PREV_MEMBER}${HASH_HOLE}${HASH_MEMBER}${HASH_HOLE}"}\n`, "latin1");
/**
 * node's direct writes (Buffer#write's argument handling costs more than a short line's copy;
 * a hash as a Buffer costs more than as a string).
 */
type Utf8Writer = Buffer & { utf8Write(text: string, offset: number): number };
type Latin1Writer = Buffer & { latin1Write(text: string, offset: number): number };

/** An entry's time in milliseconds, for a `gap` line's first and last. */
export function timeMs(time: Date | number | string | undefined, at: number): number {
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
export class Encoded {
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
    const at = this.at + (buf as Utf8Writer).utf8Write(body, this.at) - 1;
    buf.set(TAIL, at);
    this.at = at + TAIL.length;
    this.ends.push(this.at);
    this.times.push(time);
  }

  /**
   * Chains line `i` to `prev`: writes `prev` into it, and the sha256 of its text up to `prev`,
   * closed with `}` (docs/spec.md §12), as its `hash`. Returns the hash.
   */
  chain(i: number, prev: string): string {
    const buf = this.buf as Latin1Writer;
    const start = i === 0 ? 0 : this.ends[i - 1]!;
    const prevAt = this.ends[i]! - PREV_FROM_END;
    buf.latin1Write(prev, prevAt);
    // Hashed as `…"prev":"<prev>"}`: the `,` after the closing quote stands in as `}` meanwhile.
    const comma = prevAt + 65;
    buf[comma] = 0x7d;
    const hash = oneShotHash("sha256", buf.subarray(start, comma + 1), "hex");
    buf[comma] = 0x2c;
    buf.latin1Write(hash, comma + HASH_MEMBER.length - 1);
    return hash;
  }
}
