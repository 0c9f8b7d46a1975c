// The counting cells behind /metrics: histogram buckets take a value equal to a bound into that
// bound's bucket (Prometheus's `le`), status classes, and counts kept apart by label values.
import { describe, expect, it } from "vitest";
import { Buckets, LabelledCounts, STATUS_CLASSES, statusClassIndex } from "../../../metrics/counts.js";

describe("Buckets", () => {
  it("puts a value into the first bucket whose bound is at least the value, the rest into +Inf", () => {
    const b = new Buckets([1, 5, 10]);
    for (const ms of [0, 1, 1.0001, 5, 9.99, 10, 10.5, 1e9]) b.observe(ms);
    expect([...b.counts]).toEqual([2, 2, 2, 2]);
    expect(b.count).toBe(8);
    expect(b.sumMs).toBeCloseTo(0 + 1 + 1.0001 + 5 + 9.99 + 10 + 10.5 + 1e9);
  });
});

describe("statusClassIndex", () => {
  it("maps statuses to their class and anything else to none", () => {
    const classOf = (status: number) => STATUS_CLASSES[statusClassIndex(status)];
    expect([101, 200, 204, 302, 404, 429, 500, 599].map(classOf)).toEqual([
      "1xx",
      "2xx",
      "2xx",
      "3xx",
      "4xx",
      "4xx",
      "5xx",
      "5xx",
    ]);
    expect([0, 99, 600, -1].map(classOf)).toEqual(["none", "none", "none", "none"]);
  });
});

describe("LabelledCounts", () => {
  it("keeps one count per combination of label values", () => {
    const c = new LabelledCounts(["provider", "credential"]);
    c.add(["openai", "KEY_A"]);
    c.add(["openai", "KEY_A"]);
    c.add(["openai", "KEY_B"], 3);
    c.add(["anthropic", "KEY_A"]);
    expect([...c.entries()]).toEqual([
      [["openai", "KEY_A"], 2],
      [["openai", "KEY_B"], 3],
      [["anthropic", "KEY_A"], 1],
    ]);
  });

  it("works with a single label", () => {
    const c = new LabelledCounts(["result"]);
    c.add(["denied"]);
    c.add(["denied"]);
    expect([...c.entries()]).toEqual([[["denied"], 2]]);
  });
});
