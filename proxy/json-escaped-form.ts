// Inside a JSON string any character may be written as `\uXXXX` (either case of hex), and
// `"`, `\`, `/` and the control characters as short escapes (`\/`, `\n`…): a secret of n
// characters has 2^n spellings, each decoding to the secret. The fixed forms of the scrubber
// cover the spellings encoders write; this matcher covers every other one (every character
// `\u`-escaped, mixed escapes, `\/` in some places only).
//
// It is driven by the escapes in the data: a spelling that is not already a fixed form holds
// at least one escape, so matches are looked for only around a backslash whose escape decodes
// to a character of the secret. Text without a backslash costs one memchr; the `\n` and
// `\u00e9` of ordinary JSON are rejected after decoding one escape.

const BACKSLASH = 0x5c;
/** `matchFrom`: the data ran out while every byte so far fitted a spelling. */
const PARTIAL = -2;
const NO = -1;

/** The code unit each short escape stands for, by the byte after the backslash. */
const SHORT_ESCAPES = new Map<number, number>([
  [0x22, 0x22], // \"
  [0x5c, 0x5c], // \\
  [0x2f, 0x2f], // \/
  [0x62, 0x08], // \b
  [0x66, 0x0c], // \f
  [0x6e, 0x0a], // \n
  [0x72, 0x0d], // \r
  [0x74, 0x09], // \t
]);

function hexValue(byte: number): number {
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  const lower = byte | 0x20;
  if (lower >= 0x61 && lower <= 0x66) return lower - 0x61 + 10;
  return -1;
}

/**
 * The escape at `q` (a backslash): its code unit and length, NO when it is not a valid escape,
 * PARTIAL when the data ends inside a valid-looking one. The unit comes back in `out[0]`.
 */
function escapeAt(data: Buffer, q: number, out: Int32Array): number {
  const len = data.length;
  if (q + 1 >= len) return PARTIAL;
  const kind = data[q + 1]!;
  if (kind !== 0x75) {
    const unit = SHORT_ESCAPES.get(kind);
    if (unit === undefined) return NO;
    out[0] = unit;
    return 2;
  }
  let unit = 0;
  for (let i = q + 2; i < q + 6; i++) {
    if (i >= len) return PARTIAL;
    const v = hexValue(data[i]!);
    if (v === -1) return NO;
    unit = unit * 16 + v;
  }
  out[0] = unit;
  return 6;
}

/** One character of the secret: its UTF-8 bytes and its UTF-16 code units (1 or 2). */
interface Step {
  readonly literal: Buffer;
  readonly units: readonly number[];
}

export class JsonEscapedForm {
  readonly #steps: readonly Step[];
  /** The literal bytes of the steps before step i. */
  readonly #prefixes: readonly Buffer[];
  /** Step indexes by the first code unit of their escaped spelling. */
  readonly #byUnit = new Map<number, number[]>();
  readonly #unit = new Int32Array(1);
  /** The escapes that can spell a character of the secret: `\u`, and `\/` etc. when it has one. */
  readonly needles: readonly Buffer[];
  /** The first byte of the secret's literal spelling. */
  readonly firstByte: number;
  /** The longest spelling's length (every character `\u`-escaped). */
  readonly maxLength: number;
  readonly replacement: Buffer;

  constructor(secret: string, replacement: Buffer) {
    const steps: Step[] = [];
    const prefixes: Buffer[] = [];
    let prefixLength = 0;
    let maxLength = 0;
    for (const ch of secret) {
      const literal = Buffer.from(ch);
      const units = [...Array(ch.length).keys()].map((i) => ch.charCodeAt(i));
      prefixes.push(Buffer.from(secret).subarray(0, prefixLength));
      const list = this.#byUnit.get(units[0]!) ?? [];
      list.push(steps.length);
      this.#byUnit.set(units[0]!, list);
      steps.push({ literal, units });
      prefixLength += literal.length;
      maxLength += 6 * units.length;
    }
    this.#steps = steps;
    const needles = [Buffer.from("\\u")];
    for (const [kind, unit] of SHORT_ESCAPES) {
      if (this.#byUnit.has(unit)) needles.push(Buffer.from([BACKSLASH, kind]));
    }
    this.needles = needles;
    this.#prefixes = prefixes;
    this.firstByte = Buffer.from(secret)[0]!;
    this.maxLength = maxLength;
    this.replacement = replacement;
  }

  /** Where a spelling of steps k… that starts at p ends, or NO, or PARTIAL. */
  #matchFrom(data: Buffer, p: number, k: number): number {
    const len = data.length;
    const unit = this.#unit;
    for (; k < this.#steps.length; k++) {
      if (p >= len) return PARTIAL;
      const step = this.#steps[k]!;
      if (data[p] === BACKSLASH) {
        let q = p;
        let ok = true;
        for (const want of step.units) {
          const n = escapeAt(data, q, unit);
          if (n === PARTIAL) return PARTIAL;
          if (n === NO || unit[0] !== want) {
            ok = false;
            break;
          }
          q += n;
        }
        if (ok) {
          p = q;
          continue;
        }
      }
      const { literal } = step;
      const n = Math.min(literal.length, len - p);
      // A character's bytes (1-4) compared here: a call into node's compare costs more than a
      // hundred of these, and a tail with many of the secret's first byte made many calls.
      for (let i = 0; i < n; i++) if (data[p + i] !== literal[i]) return NO;
      if (n < literal.length) return PARTIAL;
      p += n;
    }
    return p;
  }

  /**
   * False when no spelling with an escape can start at or after `from`: no escape of one of
   * the secret's characters is there, and the data does not end inside an escape. (A spelling
   * without escapes is the secret itself, a fixed form.)
   */
  mayStartFrom(data: Buffer, from: number): boolean {
    return mayStartFrom(this.needles, data, from);
  }

  /** The code units whose escape can begin a spelling (one per distinct character). */
  units(): IterableIterator<number> {
    return this.#byUnit.keys();
  }

  /** True when `data` from `p` on is a proper prefix of a spelling (it must wait for more). */
  isPrefixAt(data: Buffer, p: number): boolean {
    return this.#matchFrom(data, p, 0) === PARTIAL;
  }

  /**
   * Appends `start, end` for every spelling holding an escape that starts at or after `from`
   * (found by its first escape: the characters before it are literal).
   */
  findAll(data: Buffer, from: number, out: number[]): void {
    for (const needle of this.needles) {
      for (let b = data.indexOf(needle, from); b !== -1; b = data.indexOf(needle, b + 1)) {
        this.startingAt(data, from, b, out);
      }
    }
  }

  /** Appends `start, end` for the spellings whose first escape is the one at `b`. */
  startingAt(data: Buffer, from: number, b: number, out: number[]): void {
    const unit = this.#unit;
    if (escapeAt(data, b, unit) < 0) return;
    const steps = this.#byUnit.get(unit[0]!);
    if (steps === undefined) return;
    for (const k of steps) {
      const prefix = this.#prefixes[k]!;
      const start = b - prefix.length;
      if (start < from || data.compare(prefix, 0, prefix.length, start, b) !== 0) continue;
      const end = this.#matchFrom(data, b, k);
      if (end >= 0) out.push(start, end);
    }
  }
}

/**
 * Whether one of `needles` (escapes) occurs from `from` on, or the data ends inside an escape.
 * Only the last backslash can begin an escape the end cuts off: one before it would have to
 * hold it as a hex digit. A complete escape there (the `\n"}` that ends many JSON answers) is
 * no reason to look for spellings (decision 193).
 */
export function mayStartFrom(needles: readonly Buffer[], data: Buffer, from: number): boolean {
  for (const needle of needles) if (data.indexOf(needle, from) !== -1) return true;
  const last = data.lastIndexOf(BACKSLASH);
  return last >= Math.max(from, data.length - 6) && escapeAt(data, last, SCRATCH) === PARTIAL;
}

/** The code unit of the escape at `b`, or -1 when there is no complete valid escape there. */
export function escapedUnit(data: Buffer, b: number): number {
  return escapeAt(data, b, SCRATCH) < 0 ? -1 : SCRATCH[0]!;
}

const SCRATCH = new Int32Array(1);
