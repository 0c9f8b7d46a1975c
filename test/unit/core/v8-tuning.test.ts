import { constants, PerformanceObserver, performance } from "node:perf_hooks";
import { describe, expect, it } from "vitest";
import { noteStreamed, tuneV8 } from "../../../core/v8-tuning.js";

/** Young-generation GCs that started while `run` ran, as reported by perf_hooks. */
async function minorGcsBetween(run: () => void): Promise<number> {
  const starts: number[] = [];
  const observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const kind = (e as { detail?: { kind?: number } }).detail?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MINOR) starts.push(e.startTime);
    }
  });
  observer.observe({ entryTypes: ["gc"] });
  const from = performance.now();
  run();
  const to = performance.now();
  await new Promise((resolve) => setTimeout(resolve, 100));
  observer.disconnect();
  return starts.filter((t) => t >= from && t <= to).length;
}

describe("V8 tuning", () => {
  it("runs a young-generation GC once 2 MiB of body have been streamed, not before", async () => {
    tuneV8();
    noteStreamed(4 * 1024 * 1024); // start from a fresh count
    expect(await minorGcsBetween(() => noteStreamed(1024 * 1024))).toBe(0);
    expect(await minorGcsBetween(() => noteStreamed(1024 * 1024))).toBe(1);
    expect(await minorGcsBetween(() => noteStreamed(64 * 1024))).toBe(0);
  });
});
