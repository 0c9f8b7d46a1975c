// An audit line looks for secrets in its fields alone when no secret could lie anywhere else
// (decision 191): the line it writes must be the one a scrub of the whole line gives, always.
import { describe, expect, it } from "vitest";
import type { AuditEntry } from "../../../audit/audit-entry.js";
import { serialize } from "../../../audit/audit-line.js";
import { Scrubber } from "../../../core/scrub.js";
import { LINE_STRING_FIELDS } from "../../helpers/audit.js";
import { seeded } from "../../helpers/random.js";

const FIELDS = LINE_STRING_FIELDS;
/** Characters a line's keys, time and numbers are made of, and a few more. */
const ALPHABET = 'abcdeinorst_-:.TZ0123456789"/ ';

describe("an audit line's scrub (decision 191)", () => {
  it("writes what a scrub of the whole line writes, for secrets long and short, in and across fields", () => {
    const next = seeded(191);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)]!;
    const text = (n: number) => Array.from({ length: n }, () => pick([...ALPHABET])).join("");
    let fast = 0;
    for (let trial = 0; trial < 3000; trial++) {
      const entry: Record<string, unknown> = {
        decision: pick(["injected", "passthrough", "admin_login_failed"]),
        time: next() < 0.9 ? 1_764_201_600_123 + Math.floor(next() * 1e6) : "2026-11-28T00:00:00.000Z",
      };
      for (const f of FIELDS) if (next() < 0.7) entry[f] = text(Math.floor(next() * 12));
      if (next() < 0.5) entry.status = pick([200, 429, 503]);
      if (next() < 0.5) entry.bytesIn = Math.floor(next() * 1e7);
      if (next() < 0.3) entry.durationMs = next() * 1e4;
      // The longest text a number has (25 characters).
      if (next() < 0.3) entry.lost = -(1 + next()) * 1e-6;
      const length = pick([4, 6, 8, 18, 24, 26, 27, 28, 29, 33, 40, 51]);
      const plain = serialize(entry as unknown as AuditEntry, 0, [], new Scrubber());
      // A third of the secrets are a piece of the line itself: keys, numbers, the time, a run
      // across fields, wherever it starts.
      const from = Math.floor(next() * Math.max(1, plain.length - length));
      const kind = next();
      const secret =
        kind < 0.33
          ? plain.slice(from, from + length)
          : kind < 0.43
            ? plain.slice(9, 9 + Math.min(length, 24)) // in the time
            : kind < 0.53 && plain.includes('"lost":')
              ? plain.slice(plain.indexOf('"lost":') + 6).slice(0, length) // the number's run
              : text(length);
      const scrubber = new Scrubber();
      scrubber.add(secret);
      if (next() < 0.2) scrubber.add(text(pick([8, 40])));
      const where = pick(FIELDS);
      const roll = next();
      if (roll < 0.4) entry[where] = `${text(3)}${secret}${text(2)}`;
      else if (roll < 0.6) {
        // Split across two neighbouring fields: in the fields joined, not in the line.
        const i = FIELDS.indexOf(where);
        const cut = 1 + Math.floor(next() * (secret.length - 1));
        entry[FIELDS[i]!] = secret.slice(0, cut);
        entry[FIELDS[(i + 1) % FIELDS.length]!] = secret.slice(cut);
      }
      const whole = scrubber.scrub(serialize(entry as unknown as AuditEntry, 0, [], new Scrubber()));
      expect(
        serialize(entry as unknown as AuditEntry, 0, [], scrubber),
        JSON.stringify({ secret, entry }),
      ).toBe(whole);
      if (scrubber.withinStrings(27)) fast++;
    }
    // Both ways were exercised.
    expect(fast).toBeGreaterThan(100);
    expect(fast).toBeLessThan(2700);
  });

  it("looks in the fields only for forms longer than any other run and without a quote", () => {
    const long = new Scrubber();
    long.add("sk-live-0123456789abcdefghijklmnopqrstuv");
    expect(long.withinStrings(32)).toBe(true);
    // Its raw form has 40 characters: the bound is on the shortest form.
    expect(long.withinStrings(40)).toBe(false);
    const short = new Scrubber();
    short.add("0123456789abcdefghij");
    expect(short.withinStrings(32)).toBe(false);
    const quoted = new Scrubber();
    quoted.add('sk-live-0123456789"abcdefghijklmnopqrstuv');
    expect(quoted.withinStrings(32)).toBe(false);
    expect(new Scrubber().withinStrings(32)).toBe(true);
  });

  it("calls a text clean only when a scrub would leave it as it is", () => {
    const s = new Scrubber();
    const secret = "sk-live-0123456789abcdefghijklmnopqrstuv";
    expect(s.clean(secret)).toBe(true);
    s.add(secret);
    expect(s.clean(`x${secret}y`)).toBe(false);
    expect(s.clean(Buffer.from(`user:${secret}`).toString("base64"))).toBe(false);
    expect(s.clean(encodeURIComponent(`a b ${secret}`))).toBe(false);
    // A JSON spelling with an escape, which only the second look finds.
    const escaped = `sk-live-0123456789\\u0061bcdefghijklmnopqrstuv`;
    expect(s.scrub(escaped)).not.toBe(escaped);
    expect(s.clean(escaped)).toBe(false);
    expect(s.clean("sk-live-0123456789abcdefghijklmnopqrstu")).toBe(true);
    expect(s.clean("a\\nb")).toBe(true);
  });

  it("measures the decision as written: one that JSON escapes is searched with the whole line", () => {
    // Not a decision the broker makes; the bound is on the text between the quotes.
    const secret = "\\u0001".repeat(5);
    const s = new Scrubber();
    s.add(secret);
    const entry = { decision: "\u0001".repeat(5), time: 0 } as unknown as AuditEntry;
    const line = serialize(entry, 0, [], s);
    expect(line).not.toContain(secret);
    expect(line).toBe(s.scrub(serialize(entry, 0, [], new Scrubber())));
  });

  it("redacts a long secret that is a whole field, and leaves the line's JSON whole", () => {
    const s = new Scrubber();
    const secret = "sk-live-0123456789abcdefghijklmnopqrstuv";
    s.add(secret);
    const line = serialize(
      { decision: "injected", time: 0, path: `/v1/x?token=${secret}`, client: secret },
      0,
      [],
      s,
    );
    expect(line).not.toContain(secret);
    expect(JSON.parse(line)).toMatchObject({ client: "[REDACTED]", path: "/v1/x?token=[REDACTED]" });
  });
});
