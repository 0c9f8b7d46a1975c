// Pool marks and their messages as a fleet's Redis holds them (docs/spec.md §17, decision 111): sealed
// with the fleet's TokenCipher, so whoever can write to Redis but has no home key cannot forge a
// mark or a reset, and checked field by field once opened (merge.ts `readMark`). Such a writer
// can delete fields (HDEL a real mark, which the next mark or sync puts back) and put back a
// value it saw earlier: a mark carries when it was made (`markedAt`) and each reset leaves a
// sealed tombstone with its time, so a mark from before a reset the broker knows is ignored
// (decision 137).
//
// - A hash field's value is the mark sealed and bound to the hash and the field: a value copied
//   to another credential does not open there. A tombstone is sealed the same way in its hash.
// - A message (a mark or a reset) is sealed and bound to the channel, with the time it was sent
//   (a reset's: when it was made); one older than a minute (or that far ahead) is dropped, so an
//   old one replayed does nothing.
//
// What does not open or is malformed is skipped, never thrown, and reported: a hash value once
// per distinct value (not once per read: the hash is read again on every reconnect); bad
// messages at most once a minute of each kind (each is read once, but a writer can send many).
import { createHash } from "node:crypto";
import type { TokenCipher } from "../redis/cipher.js";
import { readMark, type SharedMark } from "./merge.js";

/** A message sent longer ago than this (or this far ahead, a skewed clock) is dropped. */
const MESSAGE_MAX_AGE_MS = 60_000;
/** Distinct bad values remembered for "reported once"; past this the memory starts over. */
const MAX_REPORTED = 1_000;
/** Enough of a field to find it in Redis, not a page of whatever a writer put there. */
const SHOWN_FIELD_CHARS = 120;

export type MarkMessage =
  | { readonly k: "mark"; readonly provider: string; readonly id: string; readonly mark: SharedMark }
  | { readonly k: "reset"; readonly provider: string; readonly id?: string; readonly at?: number };

export class SealedMarks {
  readonly #cipher: TokenCipher;
  readonly #hash: string;
  readonly #channel: string;
  readonly #warn: (message: string) => void;
  readonly #reported = new Set<string>();

  constructor(cipher: TokenCipher, hash: string, channel: string, warn: (message: string) => void) {
    this.#cipher = cipher;
    this.#hash = hash;
    this.#channel = channel;
    this.#warn = warn;
  }

  seal(field: string, mark: SharedMark): string {
    return this.#cipher.seal(JSON.stringify(mark), `${this.#hash}\0${field}`);
  }

  /** The mark a hash field holds; undefined (reported once) when it does not open or is malformed. */
  open(field: string, value: string): SharedMark | undefined {
    const mark = readMark(parse(this.#cipher.open(value, `${this.#hash}\0${field}`)));
    if (mark === undefined) {
      this.#report(
        `${field}\0${value}`,
        `the mark in Redis hash ${this.#hash} field ${shown(field)} does not open with this fleet's home key or is malformed (an older keybroker's, or not a broker's); ignored`,
      );
    }
    return mark;
  }

  /** A reset's tombstone: when it was made, sealed to the tombstone hash and its field. */
  sealReset(hash: string, field: string, at: number): string {
    return this.#cipher.seal(JSON.stringify({ at }), `${hash}\0${field}`);
  }

  /** When a tombstone's reset was made; undefined (reported once) when it does not open. */
  openReset(hash: string, field: string, value: string): number | undefined {
    const v = parse(this.#cipher.open(value, `${hash}\0${field}`)) as { at?: unknown } | undefined;
    const at =
      typeof v === "object" && v !== null && Number.isSafeInteger(v.at) && (v.at as number) > 0
        ? (v.at as number)
        : undefined;
    if (at === undefined) {
      this.#report(
        `${hash}\0${field}\0${value}`,
        `the reset in Redis hash ${hash} field ${shown(field)} does not open with this fleet's home key or is malformed; ignored`,
      );
    }
    return at;
  }

  /** Reports a field of `hash` (the marks' unless told) whose name is not a credential's. */
  badField(field: string, hash = this.#hash): void {
    this.#report(
      `${hash}\0${field}\0`,
      `Redis hash ${hash} has a field that names no credential (${shown(field)}); ignored`,
    );
  }

  /** Sealed with the time it is sent; a reset's own time (`at`, just before) takes its place. */
  message(m: MarkMessage): string {
    return this.#cipher.seal(JSON.stringify({ at: Date.now(), ...m }), `${this.#channel}\0marks`);
  }

  /** A mark or reset message from another broker; undefined (reported once) when forged or stale. */
  openMessage(text: unknown): MarkMessage | undefined {
    const v =
      typeof text === "string" ? parse(this.#cipher.open(text, `${this.#channel}\0marks`)) : undefined;
    const m = readMessage(v);
    if (m === undefined) {
      this.#report(
        `message\0${minute()}`,
        `a mark message on Redis channel ${this.#channel} does not open with this fleet's home key, is malformed or is more than a minute old; ignored`,
      );
    }
    return m;
  }

  /** Reports a message on the channel that is no fleet message at all. */
  stray(): void {
    this.#report(
      `stray\0${minute()}`,
      `a message on Redis channel ${this.#channel} is not a fleet message; ignored`,
    );
  }

  #report(key: string, message: string): void {
    const digest = createHash("sha256").update(key).digest("base64");
    if (this.#reported.has(digest)) return;
    if (this.#reported.size >= MAX_REPORTED) this.#reported.clear();
    this.#reported.add(digest);
    this.#warn(`fleet state: ${message}`);
  }
}

const minute = () => Math.floor(Date.now() / 60_000);

function shown(field: string): string {
  const text = JSON.stringify(
    field.length > SHOWN_FIELD_CHARS ? `${field.slice(0, SHOWN_FIELD_CHARS)}…` : field,
  );
  return text;
}

function parse(text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function readMessage(v: unknown): MarkMessage | undefined {
  if (typeof v !== "object" || v === null) return undefined;
  const m = v as Record<string, unknown>;
  if (typeof m.at !== "number" || Math.abs(Date.now() - m.at) > MESSAGE_MAX_AGE_MS) return undefined;
  if (typeof m.provider !== "string") return undefined;
  if (m.k === "mark") {
    const mark = readMark(m.mark);
    return typeof m.id === "string" && mark !== undefined
      ? { k: "mark", provider: m.provider, id: m.id, mark }
      : undefined;
  }
  if (m.k === "reset" && (m.id === undefined || typeof m.id === "string")) {
    return { k: "reset", provider: m.provider, ...(m.id === undefined ? {} : { id: m.id }), at: m.at };
  }
  return undefined;
}
