// The canonical path of decision 101: one reading of a path, the one policy matches and the
// one forwarded; paths that servers read in more than one way have none.
import { describe, expect, it } from "vitest";
import { canonicalPath, removeDotSegments } from "../../../rules/canonical-path.js";

function path(raw: string): string {
  const c = canonicalPath(raw);
  if (!("path" in c)) throw new Error(`${raw}: ${c.problem}`);
  return c.path;
}

function problem(raw: string): string {
  const c = canonicalPath(raw);
  if ("path" in c) throw new Error(`${raw} has a canonical form: ${c.path}`);
  return c.problem;
}

describe("canonicalPath", () => {
  it.each([
    ["/repos/o/r", "/repos/o/r"],
    ["/", "/"],
    ["", "/"],
    // Escapes of unreserved characters are the characters, in either case of hex.
    ["/%72epos/o/r", "/repos/o/r"],
    ["/%72%45%70%6F%73/o", "/rEpos/o"],
    ["/%2d%2E%5f%7e", "/-._~"],
    // Dot-segments, escaped or not, are resolved; never above the root.
    ["/x/../repos/o/r", "/repos/o/r"],
    ["/x/%2e%2e/repos/o/r", "/repos/o/r"],
    ["/x/%2E%2e/repos/o/r", "/repos/o/r"],
    ["/x/.%2e/repos", "/repos"],
    ["/./repos/./o", "/repos/o"],
    ["/%2e/repos", "/repos"],
    ["/../../repos/o", "/repos/o"],
    ["/repos/o/r/.", "/repos/o/r/"],
    ["/repos/o/r/..", "/repos/o/"],
    ["/repos/o/r/%2e%2e", "/repos/o/"],
    ["/repos/..", "/"],
    ["/..", "/"],
    ["/...", "/..."],
    ["/a..b/.x", "/a..b/.x"],
    // Repeated slashes merge, before dot-segments are resolved: no empty segment for .. to eat.
    ["//repos///o//r", "/repos/o/r"],
    ["/repos/o//", "/repos/o/"],
    ["/a//../b", "/b"],
    // Other escapes stay escaped, upper-cased; valid UTF-8 stays as its escapes.
    ["/a%3fb%23c", "/a%3Fb%23c"],
    ["/caf%c3%a9", "/caf%C3%A9"],
    ["/%F0%9F%94%91/x", "/%F0%9F%94%91/x"],
    ["/100%25", "/100%25"],
    ["/a%25zz", "/a%25zz"],
    ["/a%20b", "/a%20b"],
    // Characters a path may not hold literally are escaped, so every server reads them as data.
    ["/a#b/../c", "/c"],
    ['/a"b<c>{d}|e^f`g[h]', "/a%22b%3Cc%3E%7Bd%7D%7Ce%5Ef%60g%5Bh%5D"],
    // Sub-delimiters, ':' and '@' are path characters.
    ["/v1/models/x:generate", "/v1/models/x:generate"],
    ["/a!$&'()*+,=@b", "/a!$&'()*+,=@b"],
  ])("%s → %s", (raw, expected) => {
    expect(path(raw)).toBe(expected);
  });

  it("is idempotent", () => {
    for (const raw of ["/%72epos/./o//r/..", "/caf%c3%a9/%7e", "/a#b", "/x/"]) {
      expect(path(path(raw))).toBe(path(raw));
    }
  });

  it.each([
    ["/repos/o/r/%zz/..", "invalid percent-escape"],
    ["/repos/%", "invalid percent-escape"],
    ["/repos/%4", "invalid percent-escape"],
    ["/repos/%u002e", "invalid percent-escape"],
    ["/repos/o/r/branches/main/%ff/..", "not valid UTF-8"],
    ["/%c0%ae%c0%ae/repos", "not valid UTF-8"],
    ["/%e0%80%ae/repos", "not valid UTF-8"],
    ["/%ed%a0%80", "not valid UTF-8"],
    ["/%f4%90%80%80", "not valid UTF-8"],
    ["/caf%c3", "not valid UTF-8"],
    ["/caf%c3a%a9", "not valid UTF-8"],
    ["/repos\\o\\r", "a backslash"],
    ["/x\\..\\repos", "a backslash"],
    ["/repos%5co%5Cr", "an encoded backslash"],
    ["/repos%2fo/r", "an encoded '/'"],
    ["/x/..%2F..%2Frepos", "an encoded '/'"],
    ["/repos/o/r%00", "NUL"],
    ["/repos/o/r%0a", "control character"],
    ["/repos/o/r%7F", "control character"],
    ["/repos;x/o/r", "matrix parameter"],
    ["/repos/o/r;jsessionid=1", "matrix parameter"],
    ["/repos%3bx/o/r", "matrix parameter"],
    ["/x/%252e%252e/repos", "escaped escape"],
    ["/x/%252F", "escaped escape"],
    ["/a b", "not allowed"],
    ["/a\tb", "not allowed"],
    ["/caf\u00e9", "not allowed"],
  ])("%s has no canonical form (%s)", (raw, why) => {
    expect(problem(raw)).toContain(why);
  });

  it("gives a path that needs no change back as it is, and one that does as the segments say", () => {
    // Random paths over slashes, dots and letters: the short cut must agree with merging
    // slashes and resolving dot-segments one by one (such a path has nothing else to change).
    const reference = (raw: string) => removeDotSegments(raw);
    let seed = 7;
    const next = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed;
    };
    for (let n = 0; n < 20_000; n++) {
      let raw = next() % 4 === 0 ? "" : "/";
      const len = next() % 12;
      for (let i = 0; i < len; i++) raw += "/.ab-"[next() % 5];
      if (raw === "") raw = "a";
      expect(path(raw), raw).toBe(reference(raw));
    }
  });

  it("handles a very long path in one pass", () => {
    const deep = `/${"a/".repeat(20_000)}${"../".repeat(20_000)}repos/o/r`;
    expect(path(deep)).toBe("/repos/o/r");
    const long = `/repos/${"%41".repeat(50_000)}`;
    expect(path(long)).toBe(`/repos/${"A".repeat(50_000)}`);
  });
});
