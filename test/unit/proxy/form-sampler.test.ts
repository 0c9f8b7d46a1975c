// Every form's first occurrence in one pass over a chunk (decision 193): what a plain search
// finds for each form, whatever the bytes, and the response scrub uses it for long forms.
import { randomBytes } from "node:crypto";
import { describe, expect, it, vi } from "vitest";
import { PairSampler } from "../../../proxy/form-sampler.js";
import { withAnchor } from "../../../proxy/form-search.js";
import { ResponseScrubber, ScrubPatterns } from "../../../proxy/scrub-stream.js";
import { seeded } from "../../helpers/random.js";

const forms = (...texts: string[]) =>
  texts.map((t) => withAnchor({ bytes: Buffer.from(t, "latin1"), replacement: Buffer.alloc(0) }));

describe("PairSampler", () => {
  it("is only made when every form is long enough for a step of 8", () => {
    expect(PairSampler.for([])).toBeUndefined();
    expect(PairSampler.for(forms("abcdefgh"))).toBeUndefined();
    expect(PairSampler.for(forms("abcdefghi", "sk-bench-real-key-0123456789"))).toBeDefined();
    expect(PairSampler.for(forms("sk-bench-real-key-0123456789", "short"))).toBeUndefined();
  });

  it("finds what indexOf finds for every form, in random bytes, text, runs and at the edges", () => {
    const next = seeded(193);
    const pick = (n: number) => Math.floor(next() * n);
    const alphabets = ["ab", "abc-", "sk-bench0123456789", "aaaaaaaaab", "\x00\xff-a"];
    for (let trial = 0; trial < 3000; trial++) {
      const alphabet = alphabets[trial % alphabets.length]!;
      const text = (n: number) => Array.from({ length: n }, () => alphabet[pick(alphabet.length)]).join("");
      // One to four forms of 9-40 bytes, some sharing pairs, some repeating themselves.
      const needles = Array.from({ length: 1 + pick(4) }, (_, k) =>
        k === 0 && trial % 3 === 0 ? "sk-bench-real-key-0123456789" : text(9 + pick(32)),
      );
      const set = forms(...needles);
      const sampler = PairSampler.for(set)!;
      const parts = Array.from({ length: 1 + pick(6) }, () => {
        const r = next();
        const needle = needles[pick(needles.length)]!;
        if (r < 0.3) return needle;
        if (r < 0.5) return needle.slice(0, pick(needle.length));
        if (r < 0.6) return needle.slice(1 + pick(needle.length - 1));
        if (r < 0.7) return randomBytes(pick(200)).toString("latin1");
        return text(pick(60));
      });
      const data = Buffer.from(parts.join(""), "latin1");
      // A view inside a larger buffer, as a socket's chunks are.
      const framed = Buffer.concat([Buffer.from("xx"), data, Buffer.from("yy")]).subarray(2, 2 + data.length);
      for (const d of [data, framed]) {
        const found = new Int32Array(set.length).fill(7);
        sampler.firstAll(d, found);
        set.forEach((f, i) => {
          expect(found[i], `${JSON.stringify(needles[i])} in ${JSON.stringify(d.toString("latin1"))}`).toBe(
            d.indexOf(f.bytes),
          );
        });
      }
    }
  });

  it("finds a form that overlaps an earlier, cut-off copy of itself", () => {
    const [f] = forms("abababababab");
    const data = Buffer.from("xababababababab", "latin1");
    const found = new Int32Array(1);
    PairSampler.for([f!])!.firstAll(data, found);
    expect(found[0]).toBe(1);
  });
});

describe("the response scrub's search", () => {
  it("makes no per-form search over a chunk when the secret's forms are long", () => {
    const key = "sk-sampler-test-key-0123456789abcdef";
    const scrubber = new ResponseScrubber(new ScrubPatterns([{ secret: key, replacement: "PH" }]));
    // Random bytes without a backslash, so no JSON spelling is looked for either.
    const chunk = Buffer.from(randomBytes(65_536).map((b) => (b === 0x5c ? 0x5d : b)));
    const searches = vi.spyOn(Buffer.prototype, "indexOf");
    try {
      const out = scrubber.push(chunk);
      expect(Buffer.concat([out, scrubber.end()]).equals(chunk)).toBe(true);
      expect(searches.mock.calls.length).toBe(0);
    } finally {
      searches.mockRestore();
    }
    const echoed = Buffer.concat([chunk.subarray(0, 30_000), Buffer.from(key), chunk.subarray(30_000)]);
    const fresh = new ResponseScrubber(new ScrubPatterns([{ secret: key, replacement: "PH" }]));
    const scrubbed = Buffer.concat([fresh.push(echoed), fresh.end()]);
    expect(scrubbed.includes(key)).toBe(false);
    expect(scrubbed.subarray(30_000, 30_002).toString()).toBe("PH");
  });

  it("looks for a JSON escape once over a chunk that holds a backslash", () => {
    const key = "sk-sampler-test-key-0123456789abcdef";
    const patterns = new ScrubPatterns([{ secret: key, replacement: "PH" }]);
    const chunk = Buffer.from(randomBytes(16_384).map((b) => (b === 0x5c ? 0x5d : b)));
    Buffer.from("\\u0041 and \\u00").copy(chunk, 8_000);
    const searches = vi.spyOn(Buffer.prototype, "indexOf");
    try {
      const scrubber = new ResponseScrubber(patterns);
      expect(Buffer.concat([scrubber.push(chunk), scrubber.end()]).equals(chunk)).toBe(true);
      const fromStart = searches.mock.calls.filter(
        ([needle, from]) => Buffer.isBuffer(needle) && needle.toString() === "\\u" && (from ?? 0) === 0,
      );
      expect(fromStart.length).toBe(1);
    } finally {
      searches.mockRestore();
    }
  });
});
