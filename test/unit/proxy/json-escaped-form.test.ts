// When the scrub looks for JSON spellings with escapes (decision 193): where an escape of the
// secret's characters is, or where the chunk's end cuts one off, and not for a complete `\n`
// near the end, which ends many JSON answers.
import { describe, expect, it, vi } from "vitest";
import { JsonEscapedForm, mayStartFrom } from "../../../proxy/json-escaped-form.js";
import { ResponseScrubber, ScrubPatterns } from "../../../proxy/scrub-stream.js";

const KEY = "sk-json-tail-key-0123456789";
const needles = new JsonEscapedForm(KEY, Buffer.from("PH")).needles;
const may = (text: string, from = 0) => mayStartFrom(needles, Buffer.from(text, "latin1"), from);

describe("mayStartFrom", () => {
  it("is true where an escape is, or the end cuts one off", () => {
    expect(may("text \\u0073k-json")).toBe(true);
    expect(may("text ends in a backslash \\")).toBe(true);
    expect(may("text ends in \\u")).toBe(true);
    expect(may("text ends in \\u00")).toBe(true);
    expect(may("text ends in \\u007")).toBe(true);
    expect(may("an escaped backslash at the end \\\\")).toBe(true);
  });

  it("is false for complete escapes that spell none of the secret's characters", () => {
    expect(may('{"content":"two lines\\n"}')).toBe(false);
    expect(may('{"content":"a \\"quote\\""}')).toBe(false);
    expect(may("no backslash at all")).toBe(false);
    expect(may("an invalid escape \\x")).toBe(false);
    // Before `from`: not this search's business.
    expect(may("text \\u0073k-json and more", 12)).toBe(false);
  });
});

describe("the response scrub at the end of a chunk", () => {
  it("does not look for spellings behind a complete escape that ends a JSON answer", () => {
    const patterns = new ScrubPatterns([{ secret: KEY, replacement: "PH" }]);
    const answer = Buffer.from(
      JSON.stringify({ content: `${"sessions, tokens and sums.\n".repeat(8)}` }),
      "latin1",
    );
    const looks = vi.spyOn(JsonEscapedForm.prototype, "isPrefixAt");
    try {
      const scrubber = new ResponseScrubber(patterns);
      expect(Buffer.concat([scrubber.push(answer), scrubber.end()]).equals(answer)).toBe(true);
      expect(looks).not.toHaveBeenCalled();
    } finally {
      looks.mockRestore();
    }
  });
});
