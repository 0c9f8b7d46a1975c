import { describe, expect, it } from "vitest";
import { Scrubber, secretForms } from "../../../audit/scrub.js";

describe("Scrubber", () => {
  const secret = "sk-live-abc123/+=def456";

  it("masks the raw, JSON-escaped, URL-encoded and base64 forms", () => {
    const s = new Scrubber();
    s.add(secret);
    const basic = Buffer.from(`user:${secret}`).toString("base64");
    const text = [secret, JSON.stringify({ k: secret }), encodeURIComponent(secret), basic].join(" | ");
    const out = s.scrub(text);
    for (const form of [secret, encodeURIComponent(secret)]) expect(out).not.toContain(form);
    expect(out).not.toContain(basic);
    expect(out).toContain("[REDACTED]");
  });

  it("finds the base64 core at every alignment", () => {
    const s = new Scrubber();
    s.add(secret);
    for (const prefix of ["", "a", "ab", "abc"]) {
      const b64 = Buffer.from(prefix + secret + "tail").toString("base64");
      expect(s.scrub(b64), prefix).toContain("[REDACTED]");
    }
  });

  it("leaves text without secrets alone and ignores tiny values", () => {
    const s = new Scrubber();
    s.add("ab");
    expect(s.size).toBe(0);
    s.add(secret);
    expect(s.scrub("nothing to see")).toBe("nothing to see");
  });

  it("lists distinct forms", () => {
    expect(new Set(secretForms(secret)).size).toBe(secretForms(secret).length);
  });
});
