// runStages (proxy/stages/stage.ts): the request stages in order, synchronous until one of them
// returns a promise.
import { describe, expect, it } from "vitest";
import type { Exchange } from "../../../../proxy/exchange.js";
import { runStages, type Stage } from "../../../../proxy/stages/stage.js";

const x = {} as Exchange;

describe("runStages", () => {
  it("runs synchronous stages in order and returns nothing to wait on", () => {
    const seen: number[] = [];
    const stages: Stage[] = [1, 2, 3].map((n) => () => void seen.push(n));
    expect(runStages(stages, x)).toBeUndefined();
    expect(seen).toEqual([1, 2, 3]);
  });

  it("waits for a stage that returns a promise before the next one", async () => {
    const seen: string[] = [];
    let release!: () => void;
    const stages: Stage[] = [
      () => void seen.push("a"),
      () => new Promise<void>((r) => (release = r)).then(() => void seen.push("b")),
      () => void seen.push("c"),
    ];
    const pending = runStages(stages, x);
    expect(pending).toBeInstanceOf(Promise);
    expect(seen).toEqual(["a"]);
    release();
    await pending;
    expect(seen).toEqual(["a", "b", "c"]);
  });

  it("stops at a refusal, thrown at once or rejected once a promise is under way", async () => {
    const seen: string[] = [];
    const refuse = new Error("refused");
    const sync: Stage[] = [
      () => {
        throw refuse;
      },
      () => void seen.push("never"),
    ];
    expect(() => runStages(sync, x)).toThrow(refuse);
    const later: Stage[] = [
      () => Promise.resolve(),
      () => Promise.reject(refuse),
      () => void seen.push("never"),
    ];
    await expect(runStages(later, x)).rejects.toBe(refuse);
    expect(seen).toEqual([]);
  });
});
