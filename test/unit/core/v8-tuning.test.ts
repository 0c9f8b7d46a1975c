import { execFile } from "node:child_process";
import { join } from "node:path";
import { constants, PerformanceObserver, performance } from "node:perf_hooks";
import { describe, expect, it } from "vitest";
import { noteStreamed, TIER_UP_FLAGS, tuneV8 } from "../../../core/v8-tuning.js";
import { ROOT } from "../../helpers/broker.js";

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

  it("gets a hot function to TurboFan sooner than V8's defaults where it sets a tier-up budget, with nothing on stderr", async () => {
    // Calls until V8 reports the function TurboFan-compiled (status bit 6), compiling on the
    // main thread so that the count does not depend on timing.
    const script = `
      import(${JSON.stringify(join(ROOT, "dist/core/v8-tuning.js"))}).then(({ tuneV8 }) => {
        tuneV8();
        function f(o) { let s = 0; for (let i = 0; i < 8; i++) s += o.a * i; return s; }
        let n = 0;
        for (; n < 1e6; n++) { f({ a: n }); if (%GetOptimizationStatus(f) & 64) break; }
        console.log(n);
      });`;
    const base = { ...process.env };
    delete base.KEYBROKER_V8_FLAGS;
    delete base.KEYBROKER_V8_TUNING;
    const callsUntilOptimized = (env: Record<string, string>) =>
      new Promise<{ calls: number; stderr: string }>((resolve, reject) => {
        execFile(
          process.execPath,
          ["--allow-natives-syntax", "--no-concurrent-recompilation", "-e", script],
          { env: { ...base, ...env } },
          (err, stdout, stderr) => (err ? reject(err) : resolve({ calls: Number(stdout.trim()), stderr })),
        );
      });
    const tuned = await callsUntilOptimized({});
    const defaults = await callsUntilOptimized({ KEYBROKER_V8_FLAGS: "--liftoff-only" });
    expect(tuned.stderr).toBe("");
    expect(tuned.calls).toBeGreaterThan(0);
    expect(defaults.calls).toBeLessThan(1e6);
    if (TIER_UP_FLAGS.length > 0) expect(tuned.calls).toBeLessThan(defaults.calls / 2);
    else expect(tuned.calls).toBe(defaults.calls); // Node 24: Maglev, V8's own budgets
  });
});
