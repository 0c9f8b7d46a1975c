// The placeholder index (secrets/placeholders.ts): one pattern over every placeholder, and a
// substring test in front of it that must never hide one.
import { describe, expect, it } from "vitest";
import type { ProviderRule } from "../../../rules/types.js";
import { PlaceholderIndex } from "../../../secrets/placeholders.js";

const KEY = Buffer.alloc(32, 7);
const provider = (id: string, placeholder: { value?: string; prefix?: string }) =>
  ({
    id,
    placeholder: { prefix: placeholder.prefix ?? "", value: placeholder.value },
  }) as unknown as ProviderRule;
/** An index of fixed placeholder values, one provider each, for one client. */
const fixed = (...values: string[]) =>
  new PlaceholderIndex(
    KEY,
    ["a"],
    values.map((value, i) => provider(`p${i}`, { value })),
  );

describe("PlaceholderIndex.find", () => {
  it("finds derived placeholders wherever they are, and nothing in text without one", () => {
    const index = new PlaceholderIndex(
      KEY,
      ["a", "b"],
      [provider("openai", { prefix: "sk-" }), provider("x", {})],
    );
    const all = [...index.entries()].map(([p]) => p);
    expect(all).toHaveLength(4);
    for (const p of all) {
      expect(index.find(`Bearer ${p}`)).toEqual([p]);
      expect(index.find(`${p},${p}`)).toEqual([p, p]);
    }
    expect(index.find("application/json")).toEqual([]);
    // The mark alone, or a placeholder cut short, is not one.
    expect(index.find("kbph-")).toEqual([]);
    expect(index.find(all[0]!.slice(0, -1))).toEqual([]);
  });

  it("still finds a fixed placeholder that does not hold the derived mark", () => {
    const index = new PlaceholderIndex(
      KEY,
      ["a"],
      [provider("fixed", { value: "my-fixed-placeholder-123" }), provider("derived", {})],
    );
    const derived = index.get("a", "derived")!;
    expect(index.find("token my-fixed-placeholder-123")).toEqual(["my-fixed-placeholder-123"]);
    expect(index.find(`x ${derived}`)).toEqual([derived]);
    expect(index.find("nothing here")).toEqual([]);
  });

  it("looks for fixed placeholders by the start they share, and finds each", () => {
    const index = fixed("PLACEHOLDER-BENCH-LOCAL", "PLACEHOLDER-BENCH-WILD");
    expect(index.find("Bearer PLACEHOLDER-BENCH-LOCAL")).toEqual(["PLACEHOLDER-BENCH-LOCAL"]);
    expect(index.find("x PLACEHOLDER-BENCH-WILD y")).toEqual(["PLACEHOLDER-BENCH-WILD"]);
    expect(index.find("PLACEHOLDER-BENCH-")).toEqual([]);
  });

  it("finds a placeholder that is the whole text, the shortest of several included", () => {
    // A text shorter than every placeholder is not searched (decision 190): the bound is the
    // shortest one, found exactly when it is the whole text.
    const index = fixed("a-much-longer-placeholder-0001", "ph-0002");
    expect(index.find("ph-0002")).toEqual(["ph-0002"]);
    expect(index.find("ph-000")).toEqual([]);
    expect(index.find("a-much-longer-placeholder-0001")).toEqual(["a-much-longer-placeholder-0001"]);
  });
});
