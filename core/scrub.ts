// Value-based scrubbing: every real secret the process has resolved is registered here, and
// any text the broker writes (log lines, error messages, crash output) passes through `scrub`.
// This is the second net behind the Secret type: it also catches values quoted by libraries.

const MIN_LENGTH = 4;

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** The forms a value can take in text: raw, JSON-escaped, URL-encoded, base64 (three alignments). */
export function secretForms(value: string): string[] {
  const forms = new Set<string>([value]);
  forms.add(JSON.stringify(value).slice(1, -1));
  forms.add(encodeURIComponent(value));
  forms.add(encodeURIComponent(value).replace(/%20/g, "+"));
  for (let shift = 0; shift < 3; shift++) {
    // The value's base64 inside a longer base64 text (e.g. `user:secret` in Basic auth) is
    // stable apart from the characters that straddle its edges: keep only the stable core.
    const b64 = Buffer.from("\0".repeat(shift) + value).toString("base64");
    const start = shift === 0 ? 0 : Math.ceil((shift * 4) / 3);
    const tail = (shift + value.length) % 3;
    const end = tail === 0 ? b64.length : b64.length - 4;
    const core = b64.slice(start, end).replace(/=+$/, "");
    if (core.length >= 8) forms.add(core);
  }
  return [...forms].filter((f) => f.length >= MIN_LENGTH);
}

const SHORT_ESCAPES: Readonly<Record<string, string>> = {
  '"': '\\"',
  "\\": "\\\\",
  "/": "\\/",
  "\b": "\\b",
  "\f": "\\f",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
};

/**
 * A pattern for every spelling of `value` inside a JSON string: each character as itself, as
 * `\uXXXX` (either case of hex) or as its short escape (`\/`), in any mix.
 */
export function jsonSpellings(value: string): string {
  let out = "";
  for (const ch of value) {
    const units = [...Array(ch.length).keys()].map((i) => ch.charCodeAt(i));
    const escaped = units
      .map((u) => {
        const hex = u.toString(16).padStart(4, "0");
        return `\\\\u${[...hex].map((d) => (/[a-f]/.test(d) ? `[${d}${d.toUpperCase()}]` : d)).join("")}`;
      })
      .join("");
    const short = SHORT_ESCAPES[ch];
    out += `(?:${escapeRegExp(ch)}|${escaped}${short === undefined ? "" : `|${escapeRegExp(short)}`})`;
  }
  return out;
}

export class Scrubber {
  readonly #values = new Set<string>();
  #pattern: RegExp | undefined;
  /** Every JSON spelling of the values; run only over text holding a backslash. */
  #json: RegExp | undefined;
  /** The shortest form of any value, and whether any form holds a `"` (for `withinStrings`). */
  #shortest = Number.POSITIVE_INFINITY;
  #quote = false;

  add(value: string): void {
    if (value.length < MIN_LENGTH || this.#values.has(value)) return;
    this.#values.add(value);
    const all = [...this.#values].flatMap(secretForms).sort((a, b) => b.length - a.length);
    this.#pattern = new RegExp(all.map(escapeRegExp).join("|"), "g");
    this.#json = new RegExp([...this.#values].map(jsonSpellings).join("|"), "g");
    this.#shortest = all.at(-1)!.length;
    this.#quote = all.some((f) => f.includes('"'));
  }

  get size(): number {
    return this.#values.size;
  }

  scrub(text: string): string {
    if (this.#pattern === undefined) return text;
    this.#pattern.lastIndex = 0;
    const scrubbed = text.replace(this.#pattern, "[REDACTED]");
    if (this.#json === undefined || !scrubbed.includes("\\")) return scrubbed;
    this.#json.lastIndex = 0;
    return scrubbed.replace(this.#json, "[REDACTED]");
  }

  /**
   * Whether a form can only be found inside one of a JSON text's string values, given that no
   * other run of its characters between two quotes is longer than `longest`: true when every
   * form is longer than that and none holds a quote. The audit line uses it to look for forms in
   * its fields alone rather than in the whole line (decision 191).
   */
  withinStrings(longest: number): boolean {
    return !this.#quote && this.#shortest > longest;
  }

  /** Whether `text` holds no form of any value: `scrub` would give it back unchanged. */
  clean(text: string): boolean {
    if (this.#pattern === undefined) return true;
    this.#pattern.lastIndex = 0;
    if (this.#pattern.test(text)) return false;
    if (this.#json === undefined || !text.includes("\\")) return true;
    this.#json.lastIndex = 0;
    return !this.#json.test(text);
  }
}

/** The process-wide registry of known secret values. */
export const knownSecrets = new Scrubber();
