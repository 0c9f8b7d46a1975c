import { describe, expect, it } from "vitest";
import { ResponseScrubber, ScrubPatterns, scrubHeaders } from "../../../proxy/scrub-stream.js";

// Characters that JSON and URL encoding both change, as in AWS secret keys.
const SECRET = 'wJalrXUtnFEMI/K7MDENG+bPxRfiCY"EXAMPLE\\KEY 42';
const PLACEHOLDER = "kb-kbph-0123456789ABCDEFGHIJabcdefghij";
const OPENAI = "sk-real-openai-7f3a9c1e5b2d4f60a8e1c3b5d7f9a2c4";
const OPENAI_PH = "sk-kb-kbph-AAAABBBBCCCCDDDDEEEEFFFFGGGGHHHH";

const patterns = new ScrubPatterns([
  { secret: SECRET, replacement: PLACEHOLDER },
  { secret: OPENAI, replacement: OPENAI_PH },
]);

/** The forms a leak could take in a response body. */
function leakForms(secret: string): string[] {
  return [
    secret,
    JSON.stringify(secret).slice(1, -1),
    encodeURIComponent(secret),
    encodeURIComponent(secret).toLowerCase(),
    Buffer.from(secret).toString("base64"),
  ];
}

function expectClean(text: string): void {
  for (const secret of [SECRET, OPENAI]) {
    for (const form of leakForms(secret)) expect(text).not.toContain(form);
  }
}

function streamed(chunks: readonly Buffer[], p: ScrubPatterns = patterns): Buffer {
  const s = new ResponseScrubber(p);
  const out = chunks.map((c) => s.push(c));
  out.push(s.end());
  return Buffer.concat(out);
}

const BODY = Buffer.from(
  [
    `{"error":{"message":${JSON.stringify(`Incorrect API key provided: ${SECRET}.`)},"code":"invalid_api_key"}}`,
    `<a href="https://example.com/cb?key=${encodeURIComponent(SECRET)}&alt=sse">next</a>`,
    `data: {"delta":"héllo wörld 日本語 🎉 ${OPENAI} ✓"}`,
    `{"echo":${JSON.stringify(OPENAI)},"php":"${JSON.stringify(SECRET).slice(1, -1).replace(/\//g, "\\/")}"}`,
    `{"escaped":"${uEscaped(OPENAI, (i) => i % 3 === 0)}","all":"${uEscaped(SECRET)}\\n"}`,
  ].join("\n"),
);

describe("ResponseScrubber: echoes in bodies", () => {
  it("replaces an echo in an escaped JSON error body with the placeholder, keeping valid JSON", () => {
    const body = Buffer.from(
      JSON.stringify({ error: { message: `Incorrect API key provided: ${SECRET}`, type: "auth" } }),
    );
    const out = streamed([body]).toString();
    expectClean(out);
    const parsed = JSON.parse(out) as { error: { message: string } };
    expect(parsed.error.message).toBe(`Incorrect API key provided: ${PLACEHOLDER}`);
  });

  it("replaces URL-encoded forms (upper- and lower-case hex, + for space) with the encoded placeholder", () => {
    const forms = [
      encodeURIComponent(SECRET),
      encodeURIComponent(SECRET).replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase()),
      encodeURIComponent(SECRET).replace(/%20/g, "+"),
    ];
    for (const form of forms) {
      const out = streamed([Buffer.from(`Location: /cb?key=${form}&x=1`)]).toString();
      expect(out, form).toBe(`Location: /cb?key=${encodeURIComponent(PLACEHOLDER)}&x=1`);
    }
  });

  it("replaces the PHP-style JSON form with escaped slashes", () => {
    const php = JSON.stringify(SECRET).slice(1, -1).replace(/\//g, "\\/");
    const out = streamed([Buffer.from(`{"k":"${php}"}`)]).toString();
    expect(out).toBe(`{"k":"${PLACEHOLDER}"}`);
  });

  it("leaves a body without any secret byte-for-byte unchanged", () => {
    const body = Buffer.from('{"choices":[{"delta":{"content":"sk-ish words, keys and wJal…"}}]}');
    expect(streamed([body]).equals(body)).toBe(true);
  });
});

describe("ResponseScrubber: base64 forms", () => {
  // Three alignments of the secret inside a longer base64 text, in both alphabets.
  for (const prefix of ["", "a", "ab", "user:", "x-access-token:"]) {
    for (const encoding of ["base64", "base64url"] as const) {
      it(`masks the secret in ${encoding} after ${JSON.stringify(prefix)} (offset ${prefix.length % 3})`, () => {
        const suffix = "|trailing text, still readable";
        const plain = Buffer.from(prefix + SECRET + suffix);
        const b64 = plain.toString(encoding);
        const out = streamed([Buffer.from(`{"blob":"${b64}"}`)]).toString();
        const scrubbed = /"blob":"([^"]*)"/.exec(out)![1]!;
        // Same length, so the rest of the blob still decodes as before.
        expect(scrubbed.length).toBe(b64.length);
        const decoded = Buffer.from(scrubbed, encoding).toString("latin1");
        expect(decoded.startsWith(prefix)).toBe(true);
        expect(decoded.endsWith(suffix)).toBe(true);
        const middle = decoded.slice(prefix.length, prefix.length + SECRET.length);
        // Only the edge bytes keep a few bits of the secret; no character run of it survives.
        expect(middle.slice(1, -1)).toBe("*".repeat(SECRET.length - 2));
        for (let i = 0; i + 3 <= SECRET.length; i++) expect(decoded).not.toContain(SECRET.slice(i, i + 3));
      });
    }
  }

  it("masks Basic credentials echoed in a header value", () => {
    const basic = "Basic " + Buffer.from(`x-access-token:${OPENAI}`).toString("base64");
    const out = patterns.scrubText(basic);
    expect(out).not.toBe(basic);
    expect(Buffer.from(out.slice(6), "base64").toString("latin1")).not.toContain(OPENAI.slice(1, -1));
  });
});

describe("ResponseScrubber: headers", () => {
  it("scrubs echoes in header values and returns the same object when nothing matched", () => {
    const headers = {
      location: `https://example.com/next?key=${encodeURIComponent(SECRET)}`,
      "x-debug-key": OPENAI,
      "set-cookie": ["a=1", `k=${OPENAI}`],
      "content-type": "application/json",
    };
    const out = scrubHeaders(patterns, headers);
    expect(out).not.toBe(headers);
    expect(out.location).toBe(`https://example.com/next?key=${encodeURIComponent(PLACEHOLDER)}`);
    expect(out["x-debug-key"]).toBe(OPENAI_PH);
    expect(out["set-cookie"]).toEqual(["a=1", `k=${OPENAI_PH}`]);
    expect(headers["x-debug-key"]).toBe(OPENAI); // the input is not modified
    const clean = { "content-type": "text/event-stream", "x-request-id": "req_123" };
    expect(scrubHeaders(patterns, clean)).toBe(clean);
    expect(new ResponseScrubber(patterns).scrubHeaderValue(`Bearer ${OPENAI}`)).toBe(`Bearer ${OPENAI_PH}`);
  });
});

describe("ScrubPatterns.scrubText: texts shorter than any form", () => {
  // Shorter than every form is left alone without a search (decision 190); the same text as a
  // whole buffer is searched in full, so the two must agree on every text.
  it("agrees with a full search on every slice of texts holding each form", () => {
    const key = "kq7-Zp2x";
    const p = new ScrubPatterns([{ secret: key, replacement: "PLACEHLD" }]);
    const texts = [
      `id ${key} end`,
      `x${Buffer.from(key).toString("base64")}y`,
      `a${Buffer.from(`:${key}`).toString("base64")}b`,
      `{"k":"${uEscaped(key)}"}`,
      `v=${encodeURIComponent(key)}`,
    ];
    let scrubbed = 0;
    for (const text of texts) {
      for (let i = 0; i <= text.length; i++) {
        for (let j = i; j <= text.length; j++) {
          const v = text.slice(i, j);
          const got = p.scrubText(v);
          expect(got).toBe(p.scrubBuffer(Buffer.from(v)).toString());
          if (got !== v) scrubbed++;
        }
      }
    }
    expect(scrubbed).toBeGreaterThan(50);
    expect(p.scrubText(key)).toBe("PLACEHLD");
    expect(p.scrubText(key.slice(1))).toBe(key.slice(1));
  });
});

describe("ResponseScrubber: streaming", () => {
  const whole = patterns.scrubBuffer(BODY);

  it("scrubs the sample body at once", () => {
    expectClean(whole.toString());
    expect(whole.toString()).not.toContain(uEscaped(OPENAI, (i) => i % 3 === 0));
    expect(whole.toString()).toContain(
      `{"escaped":"${OPENAI_PH}","all":"${JSON.stringify(PLACEHOLDER).slice(1, -1)}\\n"}`,
    );
    expect(whole.toString()).toContain(PLACEHOLDER);
    expect(whole.toString()).toContain(OPENAI_PH);
    expect(whole.toString()).toContain("héllo wörld 日本語 🎉");
  });

  it("catches a match split across two chunks at every split position", () => {
    for (let i = 0; i <= BODY.length; i++) {
      const out = streamed([BODY.subarray(0, i), BODY.subarray(i)]);
      if (!out.equals(whole)) expect.fail(`split at ${i}: ${out.toString()}`);
    }
  });

  it("gives the same bytes when fed one byte at a time", () => {
    const chunks = [...BODY].map((b) => Buffer.from([b]));
    expect(streamed(chunks).equals(whole)).toBe(true);
  });

  it("gives the same bytes for random chunkings, holding back at most holdback bytes", () => {
    let seed = 42;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let round = 0; round < 300; round++) {
      const s = new ResponseScrubber(patterns);
      const out: Buffer[] = [];
      let at = 0;
      while (at < BODY.length) {
        const size = 1 + rand(120);
        out.push(s.push(BODY.subarray(at, at + size)));
        expect(s.pending).toBeLessThanOrEqual(patterns.holdback);
        at += size;
      }
      out.push(s.end());
      expect(Buffer.concat(out).equals(whole)).toBe(true);
    }
  });

  it("passes UTF-8 multi-byte characters split across chunks through untouched", () => {
    const text = Buffer.from("data: 日本語 🎉 héllo — ✓ done\n\n");
    for (let i = 1; i < text.length; i++) {
      const s = new ResponseScrubber(patterns);
      const a = s.push(text.subarray(0, i));
      const b = s.push(text.subarray(i));
      const out = Buffer.concat([a, b, s.end()]);
      expect(out.equals(text)).toBe(true);
    }
  });

  it("returns a chunk whose tail cannot start a pattern at once, as the same bytes", () => {
    const s = new ResponseScrubber(patterns);
    for (const text of ['data: {"delta":"Hello"}\n\n', "data: 日本語 🎉\n\n", "x".repeat(5000) + "\n"]) {
      const chunk = Buffer.from(text);
      const out = s.push(chunk);
      expect(out).toBe(chunk);
      expect(s.pending).toBe(0);
    }
    expect(s.end().length).toBe(0);
  });

  it("holds back only a tail that could start a pattern, and releases it when it does not", () => {
    const s = new ResponseScrubber(patterns);
    const first = s.push(Buffer.from('data: {"delta":"key sk-real-op'));
    expect(first.toString()).toBe('data: {"delta":"key ');
    expect(s.pending).toBe("sk-real-op".length);
    const second = s.push(Buffer.from('en source"}\n\n'));
    expect(second.toString()).toBe('sk-real-open source"}\n\n');
    expect(s.pending).toBe(0);
  });

  it("holds a tail ending in a byte only an unusual secret holds (a newline), and scrubs it", () => {
    const pem = "-----BEGIN KEY-----\nMIIEvAIBADANBgkqhkiG9w0BAQEFAASC\n-----END KEY-----";
    const own = new ScrubPatterns([{ secret: pem, replacement: "kb-key" }]);
    const body = Buffer.from(`data: ${pem}\n\n`);
    for (let i = 0; i <= body.length; i++) {
      const out = streamed([body.subarray(0, i), body.subarray(i)], own);
      expect(out.toString(), `split at ${i}`).toBe("data: kb-key\n\n");
    }
    // Without such a secret the same event's closing newline releases it whole.
    const event = Buffer.from('data: {"delta":"-----BEGIN KEY-----"}\n\n');
    const s = new ResponseScrubber(patterns);
    expect(s.push(event)).toBe(event);
    expect(s.pending).toBe(0);
  });

  it("releases the held tail on end()", () => {
    const s = new ResponseScrubber(patterns);
    expect(s.push(Buffer.from("abc sk-real")).toString()).toBe("abc ");
    expect(s.end().toString()).toBe("sk-real");
  });
});

describe("ScrubPatterns", () => {
  it("prefers the longest of overlapping secrets, streamed or not", () => {
    const p = new ScrubPatterns([
      { secret: "abcd1234efgh", replacement: "<A>" },
      { secret: "abcd1234efgh5678ijkl", replacement: "<B>" },
    ]);
    const body = Buffer.from("x abcd1234efgh5678ijkl y abcd1234efgh z abcd1234efgh567");
    const expected = "x <B> y <A> z <A>567";
    expect(p.scrubBuffer(body).toString()).toBe(expected);
    for (let i = 0; i <= body.length; i++) {
      expect(streamed([body.subarray(0, i), body.subarray(i)], p).toString()).toBe(expected);
    }
  });

  it("is inactive for values too short to scrub, and passes chunks through", () => {
    const p = new ScrubPatterns([{ secret: "abc", replacement: "x" }]);
    expect(p.active).toBe(false);
    const chunk = Buffer.from("abc abc");
    expect(new ResponseScrubber(p).push(chunk)).toBe(chunk);
  });

  it("searches each distinct form once", () => {
    // A value with no characters to escape has one text form and its base64 cores.
    const p = new ScrubPatterns([{ secret: OPENAI, replacement: OPENAI_PH }]);
    expect(p.size).toBe(4);
    const n = OPENAI.length;
    const core = (shift: number) => Math.floor(((shift + n) * 4) / 3) - Math.ceil((shift * 4) / 3);
    expect(Math.max(n, core(0), core(1), core(2))).toBeLessThan(6 * n);
    // The longest spelling is JSON's with every character `\u`-escaped.
    expect(p.holdback).toBe(6 * n - 1);
  });
});

/** `text` with the characters at the positions `pick` approves written as `\uXXXX`. */
function uEscaped(text: string, pick: (i: number) => boolean = () => true, upper = false): string {
  return [...text]
    .map((c, i) => {
      if (!pick(i)) return JSON.stringify(c).slice(1, -1);
      const hex = c.charCodeAt(0).toString(16).padStart(4, "0");
      return `\\u${upper ? hex.toUpperCase() : hex}`;
    })
    .join("");
}

describe("ScrubPatterns: every JSON spelling", () => {
  const spellings: [string, string][] = [
    ["every character \\u-escaped", uEscaped(OPENAI)],
    ["every character \\u-escaped, upper-case hex", uEscaped(OPENAI, () => true, true)],
    ["every other character \\u-escaped", uEscaped(OPENAI, (i) => i % 2 === 0)],
    ["only the last character escaped", uEscaped(OPENAI, (i) => i === OPENAI.length - 1)],
    ["only the first character escaped", uEscaped(OPENAI, (i) => i === 0)],
    ["mixed escapes of a key with / and quotes", uEscaped(SECRET, (i) => i % 3 === 1)],
    [
      "\\/ with the quote as \\u0022",
      JSON.stringify(SECRET).slice(1, -1).replace("/", "\\/").replace('\\"', "\\u0022"),
    ],
  ];

  for (const [name, spelling] of spellings) {
    it(`scrubs ${name}, whole and split at every position, keeping valid JSON`, () => {
      const body = Buffer.from(`{"a":"\\n\\u00e9 key: ${spelling} end\\n","b":1}`);
      const decoded = JSON.parse(body.toString()) as { a: string };
      expect(decoded.a).toMatch(/key: (sk-real-openai|wJalr)/);
      const whole = patterns.scrubBuffer(body);
      const parsed = JSON.parse(whole.toString()) as { a: string };
      expect(parsed.a).not.toContain(OPENAI);
      expect(parsed.a).not.toContain(SECRET);
      expect(parsed.a).toMatch(new RegExp(`key: (${OPENAI_PH}|${PLACEHOLDER}) end`));
      for (let i = 0; i <= body.length; i++) {
        const out = streamed([body.subarray(0, i), body.subarray(i)]);
        if (!out.equals(whole)) expect.fail(`split at ${i}: ${out.toString()}`);
      }
      expect(streamed([...body].map((b) => Buffer.from([b]))).equals(whole)).toBe(true);
    });
  }

  it("holds the start of a spelling whose escapes no fixed form of its secret holds, at every split", () => {
    // One key of letters and digits: no fixed form of it holds a backslash, so only the JSON
    // spellings' alphabet tells the tail check that `\` or `\u00` may begin one.
    const key = "sk-plain-0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d";
    const own = new ScrubPatterns([{ secret: key, replacement: OPENAI_PH }]);
    for (const spelling of [uEscaped(key), uEscaped(key, (i) => i > 20, true)]) {
      const body = Buffer.from(`data: {"k":"${spelling}"}\n\n`);
      const whole = own.scrubBuffer(body);
      expect(whole.toString()).toContain(OPENAI_PH);
      for (let i = 0; i <= body.length; i++) {
        const out = streamed([body.subarray(0, i), body.subarray(i)], own);
        if (!out.equals(whole)) expect.fail(`split at ${i}: ${out.toString()}`);
      }
    }
  });

  it("keeps the length when replacements must (a body of known length)", () => {
    const body = Buffer.from(`{"k":"${uEscaped(OPENAI, (i) => i < 5)}"}`);
    const out = patterns.sameLength().scrubBuffer(body);
    expect(out.length).toBe(body.length);
    expect(JSON.parse(out.toString()).k).not.toContain(OPENAI.slice(5, 20));
  });

  it("scrubs an escaped echo in a header value", () => {
    expect(patterns.scrubText(`key=${uEscaped(OPENAI)}`)).toBe(`key=${OPENAI_PH}`);
  });

  it("leaves JSON whose escapes spell something else byte for byte", () => {
    const body = Buffer.from(
      `{"a":"line\\nnext \\u00e9t\\u00e9 ${uEscaped("sk-real-openai-7f3a")} \\\\u0073k-real"}`,
    );
    expect(patterns.scrubBuffer(body)).toBe(body);
  });
});

describe("ScrubPatterns: anchored search", () => {
  // Forms longer than 7 bytes are found by a 7-byte window and then compared whole; these
  // bodies put that window where the rest of the form does not follow.
  const KEY = "sk-real-123-abcdefgh";
  const p = new ScrubPatterns([{ secret: KEY, replacement: "PH" }]);
  const naive = (text: string) => text.split(KEY).join("PH");

  it("finds a form whose window also occurs in near misses before it", () => {
    const near = (cut: number) => KEY.slice(0, cut) + "#";
    const text = `${[4, 8, 12, 16, 19].map(near).join(" ")} ${KEY} ${near(11)}${KEY}${KEY}`;
    expect(p.scrubBuffer(Buffer.from(text)).toString()).toBe(naive(text));
  });

  it("finds a form at the very start and the very end of the data", () => {
    const text = `${KEY}middle${KEY}`;
    expect(p.scrubBuffer(Buffer.from(text)).toString()).toBe("PHmiddlePH");
  });

  it("does not report a form whose window is in the data but whose end is cut off", () => {
    const text = `tail ${KEY.slice(0, KEY.length - 1)}`;
    expect(p.scrubBuffer(Buffer.from(text)).toString()).toBe(text);
  });

  it("matches a naive replacement on random text built from the key's own bytes", () => {
    const alphabet = `${KEY}-1#`;
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    for (let round = 0; round < 200; round++) {
      let text = "";
      while (text.length < 300) {
        text +=
          rand(5) === 0
            ? KEY
            : KEY.slice(rand(KEY.length), rand(KEY.length) + 1) + alphabet[rand(alphabet.length)];
      }
      expect(p.scrubBuffer(Buffer.from(text)).toString()).toBe(naive(text));
      const cut = rand(text.length);
      const chunks = [Buffer.from(text).subarray(0, cut), Buffer.from(text).subarray(cut)];
      expect(streamed(chunks, p).toString()).toBe(naive(text));
    }
  });

  it("still scrubs header values for a secret with non-ASCII characters", () => {
    const secret = "pässwörd-Ω-1234";
    const q = new ScrubPatterns([{ secret, replacement: "PLACEHOLDER" }]);
    const headers = scrubHeaders(q, { "x-echo": `token=${secret}`, "x-other": "plain" });
    expect(headers["x-echo"]).toBe("token=PLACEHOLDER");
    expect(headers["x-other"]).toBe("plain");
  });
});

describe("ScrubPatterns.firstMatch (request bodies)", () => {
  const phs = Array.from(
    { length: 30 },
    (_, i) => `sk-kb-kbph-${String(i).padStart(2, "0")}${"Q".repeat(30)}`,
  );
  const p = new ScrubPatterns(phs.map((secret) => ({ secret, replacement: "" })));

  it("names the secret found, in each form, among many sharing a prefix", () => {
    const target = phs[17]!;
    for (const text of [
      `x=${target}&y`,
      `{"k":"${uEscaped(target)}"}`,
      encodeURIComponent(`a b ${target}`),
      Buffer.from(`u:${target}`).toString("base64"),
    ]) {
      expect(p.firstMatch(Buffer.from(text), true).pair, text).toBe(17);
    }
    expect(p.firstMatch(Buffer.from(`sk-kb-kbph-99${"Q".repeat(30)} kbph-`), true).pair).toBe(-1);
  });

  it("holds a tail that could begin one, so a split one is found with the next chunk", () => {
    const text = Buffer.from(`body ${phs[3]} end`);
    for (let i = 1; i < text.length; i++) {
      const first = p.firstMatch(text.subarray(0, i), false);
      if (first.pair !== -1) continue; // wholly in the first piece
      const rest = Buffer.concat([text.subarray(first.hold, i), text.subarray(i)]);
      expect(p.firstMatch(rest, true).pair, `split at ${i}`).toBe(3);
    }
  });
});
