// Where one form of a secret next occurs in a chunk (scrub-stream.ts): after a match, and for
// forms too short for the one pass over a chunk that finds them all (form-sampler.ts, decision
// 193). A form is looked for by
// its rarest byte first: `Buffer#indexOf` with a number is memchr behind one of V8's fast calls,
// a few times cheaper than a search for a run of bytes, which is a full call into node
// (decision 191). A byte that keeps turning up where the form does not start hands the rest of
// the chunk to the search by anchor: a window of at most 7 of the form's bytes that starts on a
// byte rare in text, confirmed by comparing the whole form. Node searches needles of up to 7
// bytes with memchr on their first byte, and longer ones with Boyer-Moore-Horspool, which is
// about ten times slower on large bodies (0.03 against 0.3 s/GiB for an 11-byte key in random
// bytes).

export interface Form {
  readonly bytes: Buffer;
  readonly replacement: Buffer;
  /** Which pair it is a form of. */
  readonly pair?: number;
}

/** A form with the byte and the window it is searched by. */
export interface SearchForm extends Form {
  readonly anchor: Buffer;
  /** Where `anchor` sits in `bytes`. */
  readonly anchorAt: number;
  /** The form's rarest byte (by `commonness`), and where it sits. */
  readonly rare: number;
  readonly rareAt: number;
}

/** Node searches needles shorter than this with memchr on their first byte. */
const ANCHOR_LENGTH = 7;
/**
 * Candidates found by the rare byte that were not the form, before the rest of the chunk is
 * searched by anchor: a chunk full of that byte costs a few calls more, not one per byte.
 */
const RARE_MISSES = 2;

/**
 * How common a byte is in the text a response carries (JSON, prose, base64, URLs): lower is
 * rarer. Only the order matters. Lower-case letters, space and JSON punctuation are common;
 * digits, upper case and other punctuation less so; everything else is rare in text.
 */
export function commonness(byte: number): number {
  if (byte === 0x20 || byte === 0x22 || byte === 0x2c || byte === 0x3a) return 5; // space " , :
  if (byte >= 0x61 && byte <= 0x7a) return "etaoinsrhl".includes(String.fromCharCode(byte)) ? 5 : 4;
  if (byte >= 0x30 && byte <= 0x39) return 3;
  if (byte >= 0x41 && byte <= 0x5a) return 2;
  if (byte >= 0x21 && byte <= 0x7e) return 1;
  return 0;
}

/** The position of the rarest byte in `bytes[from, to)` (the first of equals). */
function rarest(bytes: Buffer, from: number, to: number): number {
  let best = from;
  for (let at = from + 1; at < to; at++) if (commonness(bytes[at]!) < commonness(bytes[best]!)) best = at;
  return best;
}

export function withAnchor(form: Form): SearchForm {
  const { bytes } = form;
  const rareAt = rarest(bytes, 0, bytes.length);
  const rare = bytes[rareAt]!;
  if (bytes.length <= ANCHOR_LENGTH) return { ...form, anchor: bytes, anchorAt: 0, rare, rareAt };
  const best = rarest(bytes, 0, bytes.length - ANCHOR_LENGTH + 1);
  return { ...form, anchor: bytes.subarray(best, best + ANCHOR_LENGTH), anchorAt: best, rare, rareAt };
}

/** Where `form` next occurs whole in `data` at or after `from`, or -1. */
export function find(data: Buffer, form: SearchForm, from: number): number {
  const { bytes, rare, rareAt } = form;
  const last = data.length - bytes.length;
  let p = from + rareAt;
  for (let miss = 0; miss < RARE_MISSES; miss++) {
    const hit = data.indexOf(rare, p);
    const start = hit - rareAt;
    if (hit === -1 || start > last) return -1;
    if (matchAt(data, start, bytes)) return start;
    p = hit + 1;
  }
  return findByAnchor(data, form, p - rareAt);
}

/** `find` by the form's anchor. */
export function findByAnchor(data: Buffer, form: SearchForm, from: number): number {
  const { bytes, anchor, anchorAt } = form;
  if (anchor === bytes) return data.indexOf(bytes, from);
  const last = data.length - bytes.length;
  let p = from + anchorAt;
  for (;;) {
    const hit = data.indexOf(anchor, p);
    const start = hit - anchorAt;
    if (hit === -1 || start > last) return -1;
    if (data.compare(bytes, 0, bytes.length, start, start + bytes.length) === 0) return start;
    p = hit + 1;
  }
}

/** Whether `data` holds all of `bytes` at `at` (in range: the caller checked). */
function matchAt(data: Buffer, at: number, bytes: Buffer): boolean {
  for (let k = 0; k < bytes.length; k++) if (data[at + k] !== bytes[k]) return false;
  return true;
}

/**
 * Whether `data` ends, from `at`, with the first `length` bytes of `bytes` (byte 0 already
 * matched). A loop in JavaScript: most candidates differ at the second byte, and a call into
 * node's `Buffer.compare` costs more than the whole loop for a tail of a few dozen bytes.
 */
export function prefixAt(data: Buffer, at: number, bytes: Buffer, length: number): boolean {
  for (let k = 1; k < length; k++) if (data[at + k] !== bytes[k]) return false;
  return true;
}
