// A form is found by its rarest byte, then by its anchor (decision 191): either way, where it
// first occurs whole from a given offset, as a plain search finds it.
import { describe, expect, it, vi } from "vitest";
import { find, findByAnchor, withAnchor } from "../../../proxy/form-search.js";
import { seeded } from "../../helpers/random.js";

const form = (text: string) =>
  withAnchor({ bytes: Buffer.from(text, "latin1"), replacement: Buffer.alloc(0) });

describe("finding a form in a chunk", () => {
  it("starts from the rarest byte, and the anchor from the rarest where a whole window fits", () => {
    const f = form("sk-bench-real-key-0123456789");
    expect(String.fromCharCode(f.rare)).toBe("-");
    expect(f.rareAt).toBe(2);
    expect(f.anchor.toString()).toBe("-bench-");
    const short = form("abcDe");
    expect(short.rareAt).toBe(3);
    expect(short.anchor).toBe(short.bytes);
    // Upper case is rarer than digits, digits than lower case; the window must fit.
    expect(form("abcdefghij0123456789XYZ").rareAt).toBe(20);
    expect(form("abcdefghij0123456789XYZ").anchorAt).toBe(10);
  });

  it("finds what indexOf finds, at every offset, in text, in runs of the rare byte and at the edges", () => {
    const next = seeded(191);
    const alphabets = ["abc-", "ab-", "-", "sk-bench0123456789", "aaaaaaab"];
    for (let trial = 0; trial < 4000; trial++) {
      const alphabet = alphabets[trial % alphabets.length]!;
      const text = (n: number) =>
        Array.from({ length: n }, () => alphabet[Math.floor(next() * alphabet.length)]).join("");
      const needle = trial % 3 === 0 ? "sk-bench-real-key-0123456789" : text(2 + Math.floor(next() * 12));
      const f = form(needle);
      const parts = Array.from({ length: 1 + Math.floor(next() * 4) }, () =>
        next() < 0.4
          ? needle
          : next() < 0.5
            ? needle.slice(0, Math.floor(next() * needle.length))
            : text(Math.floor(next() * 30)),
      );
      const data = Buffer.from(parts.join(""), "latin1");
      for (let from = 0; from <= data.length; from++) {
        const want = data.indexOf(f.bytes, from);
        expect(find(data, f, from), `${needle} in ${data} from ${from}`).toBe(want);
        expect(findByAnchor(data, f, from)).toBe(want);
      }
    }
  });

  it("hands a chunk full of the rare byte to the anchor's search after a few misses", () => {
    const f = form("x-0123456789abcdef");
    const data = Buffer.from(`${"-".repeat(100_000)}x-0123456789abcdef`, "latin1");
    const searches = vi.spyOn(Buffer.prototype, "indexOf");
    try {
      expect(find(data, f, 0)).toBe(100_000);
      // Not one search a dash: the rare byte's few, then the anchor's.
      expect(searches.mock.calls.length).toBeLessThan(10);
      expect(find(data, f, 100_001)).toBe(-1);
    } finally {
      searches.mockRestore();
    }
  });
});
