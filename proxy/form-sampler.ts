// Where each form of the secrets first occurs in a chunk, all forms in one pass (decision 193).
// A form of length L that lies whole in the chunk covers L - 1 adjacent byte pairs, so one of
// them starts at a multiple of any step up to L - 1. The pass reads the pair at every step-th
// position, looks it up in a bitmap of the pairs the forms hold, and only for a pair that is
// there compares the forms that hold it, where they would start. In random bytes a pair is
// there about once in 65,536 / (pairs held); in text more often, and a miss costs one
// comparison of a byte or two. The per-form search (form-search.ts) stops at its first byte
// every 256 bytes of a download, once a form: 0.47 s/GiB for one key's four forms against
// 0.11 for this pass, and 544 against 79 ns for a 622-byte JSON answer.

import type { SearchForm } from "./form-search.js";

/** Below this step a pass reads too many pairs: the per-form search is used instead. */
const MIN_STEP = 8;

export class PairSampler {
  readonly #forms: readonly SearchForm[];
  /** Every form's pairs to look at, at most the shortest form's length − 1 apart. */
  readonly #step: number;
  /** One bit a byte pair (first byte × 256 + second) that some form holds. */
  readonly #bits = new Uint8Array(8192);
  /** For each held pair: [form index, offset of the pair in the form, ...]. */
  readonly #holders = new Map<number, number[]>();

  private constructor(forms: readonly SearchForm[], step: number) {
    this.#forms = forms;
    this.#step = step;
    forms.forEach((form, i) => {
      const b = form.bytes;
      for (let at = 0; at + 1 < b.length; at++) {
        const pair = (b[at]! << 8) | b[at + 1]!;
        this.#bits[pair >> 3]! |= 1 << (pair & 7);
        const list = this.#holders.get(pair);
        if (list === undefined) this.#holders.set(pair, [i, at]);
        else list.push(i, at);
      }
    });
  }

  /** A sampler for `forms`, or undefined when the shortest is too short for a step worth it. */
  static for(forms: readonly SearchForm[]): PairSampler | undefined {
    if (forms.length === 0) return undefined;
    let shortest = Number.POSITIVE_INFINITY;
    for (const f of forms) shortest = Math.min(shortest, f.bytes.length);
    const step = shortest - 1;
    return step >= MIN_STEP ? new PairSampler(forms, step) : undefined;
  }

  /**
   * Sets `next[i]` to where `forms[i]` first occurs whole in `data`, or -1: for every form what
   * `data.indexOf(form.bytes)` gives. The first sample at which a form is found finds its first
   * occurrence: the first occurrence, at `s`, is seen at the first sample at or after `s`
   * (which lies inside it, the step being shorter than the form), and no sample before that one
   * lies inside any occurrence. Of several starts seen at that sample (the form holds the pair
   * more than once), the least.
   */
  firstAll(data: Buffer, next: Int32Array): void {
    const forms = this.#forms;
    const bits = this.#bits;
    next.fill(-1, 0, forms.length);
    let found = 0;
    const last = data.length - 1;
    for (let p = 0; p < last; p += this.#step) {
      const pair = (data[p]! << 8) | data[p + 1]!;
      if ((bits[pair >> 3]! & (1 << (pair & 7))) === 0) continue;
      const holders = this.#holders.get(pair)!;
      for (let h = 0; h < holders.length; h += 2) {
        const i = holders[h]!;
        const start = p - holders[h + 1]!;
        const bytes = forms[i]!.bytes;
        const prior = next[i]!;
        if (start < 0 || start + bytes.length > data.length || (prior !== -1 && start >= prior)) continue;
        if (!matches(data, start, bytes)) continue;
        if (prior === -1) found++;
        next[i] = start;
      }
      if (found === forms.length) return;
    }
  }
}

/** Whether `data` holds all of `bytes` at `at` (in range: the caller checked). */
function matches(data: Buffer, at: number, bytes: Buffer): boolean {
  for (let k = 0; k < bytes.length; k++) if (data[at + k] !== bytes[k]) return false;
  return true;
}
