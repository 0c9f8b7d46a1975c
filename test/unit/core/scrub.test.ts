import { describe, expect, it } from "vitest";
import { Scrubber, secretForms } from "../../../core/scrub.js";

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

  it("masks JSON spellings with every character \\u-escaped, mixed escapes and \\/", () => {
    const s = new Scrubber();
    s.add(secret);
    const u = (c: string, upper = false) => {
      const hex = c.charCodeAt(0).toString(16).padStart(4, "0");
      return `\\u${upper ? hex.toUpperCase() : hex}`;
    };
    const spellings = [
      [...secret].map((c) => u(c)).join(""),
      [...secret].map((c) => u(c, true)).join(""),
      [...secret].map((c, i) => (i % 2 ? u(c) : c === "/" ? "\\/" : c)).join(""),
      secret.replace("/", "\\/").replace("a", u("a")),
    ];
    for (const spelling of spellings) {
      const line = `{"message":"bad key ${spelling}\\n"}`;
      expect(JSON.parse(line).message).toContain(secret);
      expect(s.scrub(line), spelling).toBe('{"message":"bad key [REDACTED]\\n"}');
    }
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
