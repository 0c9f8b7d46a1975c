// Response scrubbing (docs/spec.md §3.3): an upstream that echoes the real credential back (an error
// body quoting the key, a debug endpoint listing request headers, a redirect carrying `?key=`)
// must never show it to the agent. Every form of the secret is replaced in the streamed body and
// in the response headers, streaming-safe: a match split across chunks is caught, while a chunk
// whose tail cannot start a match goes out at once, untouched.
//
// Work is on bytes (a multi-byte UTF-8 character split across chunks passes through intact),
// with one pass over a chunk for every form at once (form-sampler.ts), or a search or two per
// form and chunk for forms too short for that pass (form-search.ts).
import type { IncomingHttpHeaders } from "node:http";
import { PairSampler } from "./form-sampler.js";
import { type Form, find, prefixAt, type SearchForm, withAnchor } from "./form-search.js";
import { escapedUnit, JsonEscapedForm, mayStartFrom } from "./json-escaped-form.js";

/** One secret to hide, and the client's placeholder that takes its place. */
export interface ScrubPair {
  readonly secret: string;
  readonly replacement: string;
}

/** Shorter values cannot be scrubbed without mangling ordinary text (same floor as core/scrub.ts). */
const MIN_SECRET_LENGTH = 4;
/** A base64 core shorter than this would match ordinary base64 by chance. */
const MIN_BASE64_CORE = 8;
/** What a base64-embedded secret decodes to after scrubbing: `*` bytes of the same length. */
const MASK_BYTE = 0x2a;
const EMPTY = Buffer.alloc(0);

type Encoder = (value: string) => string;

const hex = (c: string): string =>
  [...Buffer.from(c)].map((b) => "%" + b.toString(16).toUpperCase().padStart(2, "0")).join("");
const json: Encoder = (v) => JSON.stringify(v).slice(1, -1);
/** RFC 3986 strict: everything but unreserved characters (Python's `quote(safe="")`). */
const urlStrict: Encoder = (v) => v.replace(/[^A-Za-z0-9\-._~]/gu, hex);
const lowerHex = (v: string): string => v.replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase());

/**
 * The textual forms a value takes in a response, in order of preference for the replacement:
 * raw; JSON-escaped (plain, with `\/` as PHP writes it, HTML-safe as Go writes it, ASCII-only as
 * Python writes it); URL-encoded (JavaScript's `encodeURIComponent`, RFC 3986 strict, Python's
 * `quote` that keeps `/`, `+` for spaces, lower-case hex).
 */
const TEXT_ENCODERS: readonly Encoder[] = [
  (v) => v,
  json,
  (v) => json(v).replace(/\//g, "\\/"),
  (v) => json(v).replace(/[<>&]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0")),
  (v) => json(v).replace(/[\u007f-\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0")),
  encodeURIComponent,
  urlStrict,
  (v) => urlStrict(v).replace(/%2F/g, "/"),
  (v) => encodeURIComponent(v).replace(/%20/g, "+"),
  (v) => lowerHex(encodeURIComponent(v)),
  (v) => lowerHex(urlStrict(v)),
];

/**
 * The value's base64 inside a longer base64 text (Basic credentials echoed in a JSON body, a
 * base64 blob holding the key) depends on its offset modulo 3. For each alignment, the "core" is
 * the run of base64 characters made of the value's bits alone; the one or two characters at each
 * edge mix in the neighbours' bits and cannot be known in advance.
 *
 * The core is replaced by the core of a same-length run of `*` at the same alignment: the text
 * keeps its length and alignment, so everything around still decodes as before, and the secret
 * decodes to `****` (the edge characters keep at most 4 bits of the first and last byte). A
 * same-alignment encoding of the placeholder would shift every later byte whenever the lengths
 * differ modulo 3, garbling the rest of the blob.
 */
function base64Forms(secret: Buffer): Form[] {
  const mask = Buffer.alloc(secret.length, MASK_BYTE);
  const forms: Form[] = [];
  for (const url of [false, true]) {
    const encoding = url ? "base64url" : "base64";
    for (let shift = 0; shift < 3; shift++) {
      const pad = Buffer.alloc(shift);
      const b64 = Buffer.concat([pad, secret]).toString(encoding);
      const masked = Buffer.concat([pad, mask]).toString(encoding);
      // Character i holds bits [6i, 6i+6); the value holds bits [8·shift, 8·(shift+length)).
      const start = Math.ceil((shift * 4) / 3);
      const end = Math.floor(((shift + secret.length) * 4) / 3);
      const core = b64.slice(start, end);
      if (core.length < MIN_BASE64_CORE) continue;
      forms.push({
        bytes: Buffer.from(core, "latin1"),
        replacement: Buffer.from(masked.slice(start, end), "latin1"),
      });
    }
  }
  return forms;
}

/** Forms that share one search window: one `indexOf` finds candidates for all of them. */
interface AnchorGroup {
  readonly anchor: Buffer;
  readonly members: readonly { bytes: Buffer; anchorAt: number; pair?: number }[];
}

const GROUP_WINDOW = 5;

/**
 * Groups forms by a window of GROUP_WINDOW bytes most of them share (greedy set cover): many
 * placeholders share their prefix and `kbph-`, in every encoding, so 40 secrets' 160 forms are
 * found with a handful of searches instead of 160. Forms shorter than the window are alone.
 */
function groupByAnchor(forms: readonly SearchForm[]): AnchorGroup[] {
  const windows = new Map<string, Set<number>>();
  forms.forEach((f, i) => {
    for (let at = 0; at + GROUP_WINDOW <= f.bytes.length; at++) {
      const key = f.bytes.toString("latin1", at, at + GROUP_WINDOW);
      const set = windows.get(key) ?? new Set<number>();
      set.add(i);
      windows.set(key, set);
    }
  });
  const groups: AnchorGroup[] = [];
  const left = new Set(forms.keys());
  for (const i of left) {
    if (forms[i]!.bytes.length < GROUP_WINDOW) {
      groups.push({ anchor: forms[i]!.bytes, members: [{ ...forms[i]!, anchorAt: 0 }] });
      left.delete(i);
    }
  }
  while (left.size > 0) {
    let bestKey = "";
    let bestCount = 0;
    for (const [key, set] of windows) {
      let count = 0;
      for (const i of set) if (left.has(i)) count++;
      if (count > bestCount) {
        bestKey = key;
        bestCount = count;
      }
    }
    const anchor = Buffer.from(bestKey, "latin1");
    const members: AnchorGroup["members"][number][] = [];
    for (const i of windows.get(bestKey)!) {
      if (!left.has(i)) continue;
      left.delete(i);
      const f = forms[i]!;
      members.push({ bytes: f.bytes, anchorAt: f.bytes.indexOf(anchor), pair: f.pair });
    }
    groups.push({ anchor, members });
  }
  return groups;
}

/**
 * The compiled forms of a set of secrets: build it once per (secrets, placeholder) and reuse it
 * for every response; a `ResponseScrubber` per response only holds the stream's state.
 */
export class ScrubPatterns {
  readonly #forms: readonly SearchForm[];
  /** Every form's first occurrence in one pass, when the forms are long enough (form-sampler.ts). */
  readonly #sampler: PairSampler | undefined;
  /** Every other JSON spelling of each secret (`\u`-escaped characters, mixed escapes). */
  readonly #json: readonly JsonEscapedForm[];
  /** Bytes a JSON spelling can start with: a secret's first byte, or a backslash. */
  readonly #jsonFirst = new Uint8Array(256);
  readonly #found: number[] = [];
  /** `replace`'s next-match table for a whole buffer (scrubBuffer): `replace` runs to the end in one call. */
  #wholeNext: Int32Array | undefined;
  readonly #jsonPairs: readonly number[];
  /** Every escape needle of the JSON spellings, and the spellings by the unit an escape starts. */
  readonly #jsonNeedles: readonly Buffer[];
  readonly #jsonByUnit = new Map<number, number[]>();
  /** Forms grouped by a shared search window, for `firstMatch` over many secrets (built on first use). */
  #groups: AnchorGroup[] | undefined;
  /** Forms by their first byte, for the tail check. */
  readonly #byFirst: (SearchForm[] | undefined)[] = new Array(256);
  /** 1 for each byte that some form, or some JSON spelling of a secret, holds (the tail check). */
  readonly #inForm = new Uint8Array(256);
  /** Longest form length − 1: the most a stream ever holds back. */
  readonly holdback: number;
  /**
   * Longest fixed form's length − 1: how far from the end a fixed form's prefix can start. The
   * JSON spellings (up to six bytes a character) set `holdback`, and are looked for only where
   * an escape that can start one is; without one, the tail check scans only this many bytes.
   */
  readonly #fixedHoldback: number;

  readonly #pairs: readonly ScrubPair[];
  readonly #fitLength: boolean;
  #sameLength: ScrubPatterns | undefined;
  /**
   * The forms as strings when every one is ASCII (secrets almost always are): a string holds
   * such a form exactly when its UTF-8 bytes do, so a header value can be checked without
   * encoding it.
   */
  readonly #asciiForms: readonly string[] | undefined;
  /**
   * The shortest of the ASCII forms. A text shorter holds none of them, nor a JSON spelling of a
   * secret, which is at least as long as the secret's own form (decision 190): most header
   * names and values are shorter than any key.
   */
  readonly #shortest: number;

  /**
   * `fitLength`: every replacement is cut or padded with `*` to the length of what it
   * replaces, so a body keeps its length (and its Content-Length stays true).
   */
  constructor(pairs: readonly ScrubPair[], opts: { fitLength?: boolean } = {}) {
    this.#pairs = pairs;
    const seen = new Set<string>();
    const forms: Form[] = [];
    const json: JsonEscapedForm[] = [];
    let pair = 0;
    const jsonPairs: number[] = [];
    const add = (bytes: Buffer, replacement: Buffer) => {
      const key = bytes.toString("latin1");
      if (bytes.length === 0 || seen.has(key)) return;
      seen.add(key);
      if (opts.fitLength && replacement.length !== bytes.length) {
        const fitted = Buffer.alloc(bytes.length, MASK_BYTE);
        replacement.copy(fitted, 0, 0, Math.min(replacement.length, bytes.length));
        replacement = fitted;
      }
      forms.push({ bytes, replacement, pair });
    };
    for (; pair < pairs.length; pair++) {
      const { secret, replacement } = pairs[pair]!;
      if (secret.length < MIN_SECRET_LENGTH || secret === replacement) continue;
      for (const encode of TEXT_ENCODERS) {
        add(Buffer.from(encode(secret)), Buffer.from(encode(replacement)));
      }
      for (const f of base64Forms(Buffer.from(secret))) add(f.bytes, f.replacement);
      json.push(new JsonEscapedForm(secret, Buffer.from(JSON.stringify(replacement).slice(1, -1))));
      for (const b of Buffer.from(secret)) this.#inForm[b] = 1;
      jsonPairs.push(pair);
    }
    this.#json = json;
    this.#jsonPairs = jsonPairs;
    const needles = new Map<string, Buffer>();
    json.forEach((j, i) => {
      for (const n of j.needles) needles.set(n.toString("latin1"), n);
      for (const unit of j.units()) {
        const list = this.#jsonByUnit.get(unit) ?? [];
        list.push(i);
        this.#jsonByUnit.set(unit, list);
      }
    });
    this.#jsonNeedles = [...needles.values()];
    for (const j of json) {
      this.#jsonFirst[j.firstByte] = 1;
      this.#jsonFirst[0x5c] = 1;
    }
    this.#fitLength = opts.fitLength === true;
    // Longest first: at one position the longest form wins, as a regex alternation sorted so.
    forms.sort((a, b) => b.bytes.length - a.bytes.length);
    this.#forms = forms.map(withAnchor);
    this.#sampler = PairSampler.for(this.#forms);
    this.#asciiForms = forms.every((f) => f.bytes.every((b) => b < 0x80))
      ? forms.map((f) => f.bytes.toString("latin1"))
      : undefined;
    // Sorted longest first: the last is the shortest.
    this.#shortest = this.#asciiForms === undefined ? 0 : (forms.at(-1)?.bytes.length ?? 0);
    // A JSON spelling is the secret's own bytes and escapes: `\uXXXX` in either case of hex, or
    // a short escape (json-escaped-form.ts).
    if (json.length > 0) for (const b of Buffer.from('\\u0123456789abcdefABCDEF"/bfnrt')) this.#inForm[b] = 1;
    for (const f of this.#forms) {
      for (const b of f.bytes) this.#inForm[b] = 1;
      const first = f.bytes[0]!;
      const bucket = this.#byFirst[first] ?? [];
      bucket.push(f);
      this.#byFirst[first] = bucket;
    }
    this.#fixedHoldback = forms.length === 0 ? 0 : forms[0]!.bytes.length - 1;
    this.holdback = Math.max(this.#fixedHoldback, ...json.map((j) => j.maxLength - 1));
  }

  /** The same patterns with length-preserving replacements (built once, on first use). */
  sameLength(): ScrubPatterns {
    this.#sameLength ??= new ScrubPatterns(this.#pairs, { fitLength: true });
    return this.#sameLength;
  }

  /** False when there is nothing to scrub (no secret long enough): skip the scrubber. */
  get active(): boolean {
    return this.#forms.length > 0 || this.#json.length > 0;
  }

  /** The number of byte patterns searched for (every form of every secret). */
  get size(): number {
    return this.#forms.length;
  }

  /**
   * Where the bytes that must wait for the next chunk begin: the first position at or after
   * `from`, within the last `holdback` bytes, whose remainder is a proper prefix of some form.
   */
  holdStart(data: Buffer, from: number, jsonHere = this.#jsonSpellingsMayBeIn(data, 0)): number {
    const len = data.length;
    const start = Math.max(from, len - this.holdback);
    // JSON spellings with escapes are looked at only when an escape that can start one is there.
    const json = jsonHere && mayStartFrom(this.#jsonNeedles, data, start);
    // Without them, no prefix starts further back than the longest fixed form (an SSE event of
    // 200 bytes is otherwise scanned whole, byte by byte, for a key of 40 characters).
    const byFirst = this.#byFirst;
    // A held tail runs to the chunk's end, so it starts after the last byte that no form holds:
    // the newline that ends an SSE event releases the whole chunk without a look at its tail.
    const inForm = this.#inForm;
    let last = len - 1;
    for (const first = json ? start : Math.max(from, len - this.#fixedHoldback); last >= first; last--) {
      if (inForm[data[last]!] === 0) break;
    }
    for (let p = last + 1; p < len; p++) {
      const byte = data[p]!;
      if (json && this.#jsonFirst[byte] === 1) {
        for (const j of this.#json) if (j.isPrefixAt(data, p)) return p;
      }
      const candidates = byFirst[byte];
      if (candidates === undefined) continue;
      const rest = len - p;
      for (const f of candidates) {
        if (f.bytes.length > rest && prefixAt(data, p, f.bytes, rest)) return p;
      }
    }
    return len;
  }

  /**
   * Replaces every form found in `data` that starts before `limit` (the hold point; `final`
   * means the stream ended and nothing is held). Returns the bytes to send and the new hold point.
   */
  replace(data: Buffer, final: boolean, next: Int32Array): { out: Buffer; hold: number } {
    const forms = this.#forms;
    const jsonHere = this.#jsonSpellingsMayBeIn(data, 0);
    let hold = final ? data.length : this.holdStart(data, 0, jsonHere);
    if (this.#sampler !== undefined) this.#sampler.firstAll(data, next);
    else for (let i = 0; i < forms.length; i++) next[i] = find(data, forms[i]!, 0);
    // JSON spellings with escapes, as [start, end, form index] sorted by start, longest first.
    const found = this.#found;
    // Setting an array's length is a call into V8's runtime even when it is 0 already, and most
    // chunks find no escaped spelling: about a tenth of a small SSE event's scrub.
    if (found.length !== 0) found.length = 0;
    if (jsonHere) this.#findJson(data, found);
    let j = 0;
    const pieces: Buffer[] = [];
    let cursor = 0;
    for (;;) {
      while (j < found.length && found[j]! < cursor) j += 3;
      if (j < found.length && found[j]! < hold) {
        const start = found[j]!;
        // A fixed form at the same place wins only when it is longer.
        let fixedEnd = -1;
        for (let i = 0; i < forms.length; i++) {
          const at = next[i]! < cursor ? find(data, forms[i]!, cursor) : next[i]!;
          next[i] = at;
          if (at !== -1 && at < start) {
            fixedEnd = Number.POSITIVE_INFINITY;
            break;
          }
          if (at === start) fixedEnd = Math.max(fixedEnd, start + forms[i]!.bytes.length);
        }
        if (fixedEnd < found[j + 1]!) {
          const end = found[j + 1]!;
          if (start > cursor) pieces.push(data.subarray(cursor, start));
          pieces.push(this.#fit(this.#json[found[j + 2]!]!.replacement, end - start));
          cursor = end;
          if (!final && cursor > hold) hold = this.holdStart(data, cursor, jsonHere);
          continue;
        }
      }
      let best = -1;
      let bestAt = Number.POSITIVE_INFINITY;
      for (let i = 0; i < forms.length; i++) {
        let at = next[i]!;
        if (at !== -1 && at < cursor) {
          at = find(data, forms[i]!, cursor);
          next[i] = at;
        }
        if (at !== -1 && at < bestAt) {
          best = i;
          bestAt = at;
        }
      }
      if (best === -1 || bestAt >= hold) break;
      const form = forms[best]!;
      if (bestAt > cursor) pieces.push(data.subarray(cursor, bestAt));
      pieces.push(form.replacement);
      cursor = bestAt + form.bytes.length;
      // A match that runs past the hold point is complete and final: hold only what follows it.
      if (!final && cursor > hold) hold = this.holdStart(data, cursor, jsonHere);
    }
    if (cursor === 0) return { out: hold === data.length ? data : data.subarray(0, hold), hold };
    if (hold > cursor) pieces.push(data.subarray(cursor, hold));
    return { out: Buffer.concat(pieces), hold };
  }

  /**
   * Whether `data` from `from` on may hold a JSON spelling with an escape: whether it holds a
   * backslash (most data has none). The escapes themselves are looked for once, by #findJson
   * over the whole chunk and by holdStart over its tail: a search for them here as well was a
   * second pass over every chunk that holds one (decision 193).
   */
  #jsonSpellingsMayBeIn(data: Buffer, from: number): boolean {
    return this.#json.length > 0 && data.lastIndexOf(0x5c) >= from;
  }

  #findJson(data: Buffer, found: number[]): void {
    // Each escape is decoded once and tried only against the secrets holding its character.
    const pairs: number[] = [];
    for (const needle of this.#jsonNeedles) {
      for (let b = data.indexOf(needle); b !== -1; b = data.indexOf(needle, b + 1)) {
        const candidates = this.#jsonByUnit.get(escapedUnit(data, b));
        if (candidates === undefined) continue;
        for (const i of candidates) {
          pairs.length = 0;
          this.#json[i]!.startingAt(data, 0, b, pairs);
          for (let k = 0; k < pairs.length; k += 2) found.push(pairs[k]!, pairs[k + 1]!, i);
        }
      }
    }
    if (found.length <= 3) return;
    const triples: [number, number, number][] = [];
    for (let k = 0; k < found.length; k += 3) triples.push([found[k]!, found[k + 1]!, found[k + 2]!]);
    triples.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
    found.length = 0;
    for (const t of triples) found.push(...t);
  }

  /** `replacement` cut or padded with `*` to `length`, when replacements keep the length. */
  #fit(replacement: Buffer, length: number): Buffer {
    if (!this.#fitLength || replacement.length === length) return replacement;
    const fitted = Buffer.alloc(length, MASK_BYTE);
    replacement.copy(fitted, 0, 0, Math.min(replacement.length, length));
    return fitted;
  }

  /**
   * Detection without replacing (a request body bound for the wrong host): the pair of a form
   * found anywhere in `data`, or -1, and where the bytes that must wait for the next
   * chunk begin (`final`: none wait).
   */
  firstMatch(data: Buffer, final: boolean): { pair: number; hold: number } {
    const jsonHere = this.#jsonSpellingsMayBeIn(data, 0);
    const hold = final ? data.length : this.holdStart(data, 0, jsonHere);
    this.#groups ??= groupByAnchor(this.#forms);
    for (const { anchor, members } of this.#groups) {
      for (let hit = data.indexOf(anchor); hit !== -1; hit = data.indexOf(anchor, hit + 1)) {
        for (const f of members) {
          const start = hit - f.anchorAt;
          const end = start + f.bytes.length;
          if (start >= 0 && end <= data.length && data.compare(f.bytes, 0, f.bytes.length, start, end) === 0)
            return { pair: f.pair ?? -1, hold };
        }
      }
    }
    if (jsonHere) {
      const found = this.#found;
      if (found.length !== 0) found.length = 0;
      this.#findJson(data, found);
      if (found.length > 0) return { pair: this.#jsonPairs[found[2]!]!, hold };
    }
    return { pair: -1, hold };
  }

  /** Scrubs one complete text, e.g. a response header value. */
  scrubText(value: string): string {
    if (!this.active) return value;
    const ascii = this.#asciiForms;
    if (ascii !== undefined) {
      if (value.length < this.#shortest) return value;
      let found = this.#json.length > 0 && value.includes("\\");
      for (let i = 0; i < ascii.length && !found; i++) found = value.includes(ascii[i]!);
      if (!found) return value;
    }
    const bytes = Buffer.from(value);
    const { out } = this.replace(bytes, true, new Int32Array(this.#forms.length));
    return out === bytes ? value : out.toString();
  }

  /** Scrubs a whole buffer (a held-back error body). Returns `data` itself when nothing matched. */
  scrubBuffer(data: Buffer): Buffer {
    if (!this.active) return data;
    this.#wholeNext ??= new Int32Array(this.#forms.length);
    return this.replace(data, true, this.#wholeNext).out;
  }
}

/**
 * The scrubber of one response body: `push` each chunk as it arrives and send what it returns
 * (possibly empty, never more than `holdback` bytes short of what came in), then send `end()`.
 * The output equals scrubbing the whole body at once.
 */
export class ResponseScrubber {
  readonly patterns: ScrubPatterns;
  #held: Buffer = EMPTY;
  readonly #next: Int32Array;

  constructor(patterns: ScrubPatterns | readonly ScrubPair[]) {
    this.patterns = patterns instanceof ScrubPatterns ? patterns : new ScrubPatterns(patterns);
    this.#next = new Int32Array(this.patterns.size);
  }

  /** The bytes safe to send now. Returns `chunk` itself when nothing matched or is held. */
  push(chunk: Buffer): Buffer {
    if (!this.patterns.active) return chunk;
    const data = this.#held.length === 0 ? chunk : Buffer.concat([this.#held, chunk]);
    const { out, hold } = this.patterns.replace(data, false, this.#next);
    // Copy the (small) tail so the chunk it came from can be freed.
    this.#held = hold === data.length ? EMPTY : Buffer.from(data.subarray(hold));
    return out;
  }

  /** The held-back tail, scrubbed: send it last. */
  end(): Buffer {
    if (this.#held.length === 0) return EMPTY;
    const data = this.#held;
    this.#held = EMPTY;
    return this.patterns.replace(data, true, this.#next).out;
  }

  /** Bytes currently held back waiting for the next chunk. */
  get pending(): number {
    return this.#held.length;
  }

  scrubHeaderValue(value: string): string {
    return this.patterns.scrubText(value);
  }
}

/** `value` scrubbed by `patterns`, when there are any (upstream text quoted in a message). */
export function scrubText(patterns: ScrubPatterns | undefined, value: string): string {
  return patterns === undefined ? value : patterns.scrubText(value);
}

/**
 * Response headers (names and values) with every secret form replaced. Returns `headers`
 * itself when nothing matched (the common case allocates nothing).
 */
export function scrubHeaders(patterns: ScrubPatterns, headers: IncomingHttpHeaders): IncomingHttpHeaders {
  if (!patterns.active) return headers;
  let copy: IncomingHttpHeaders | undefined;
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined) continue;
    const scrubbed = Array.isArray(value)
      ? value.map((v) => patterns.scrubText(v))
      : patterns.scrubText(value);
    const changed = Array.isArray(value)
      ? (scrubbed as string[]).some((v, i) => v !== value[i])
      : scrubbed !== value;
    // A name is a token, and so are most keys: `x-echo-<key>: 1` would carry it.
    const scrubbedName = patterns.scrubText(name);
    if (changed || scrubbedName !== name) {
      copy ??= { ...headers };
      if (scrubbedName !== name) delete copy[name];
      copy[scrubbedName] = scrubbed as string & string[];
    }
  }
  return copy ?? headers;
}
