import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { constants, PerformanceObserver, performance } from "node:perf_hooks";
import v8 from "node:v8";
import { describe, expect, it, vi } from "vitest";
import {
  forgetLaunchEnv,
  NODE_FLAGS,
  noteStreamed,
  TIER_UP_FLAGS,
  tunedLaunch,
  tuneV8,
  tuningFor,
  V8_FLAGS,
} from "../../../core/v8-tuning.js";
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
    // Without the GC in quiet moments, which starts the count afresh.
    process.env.KEYBROKER_IDLE_GC = "off";
    tuneV8();
    try {
      noteStreamed(4 * 1024 * 1024); // start from a fresh count
      expect(await minorGcsBetween(() => noteStreamed(1024 * 1024))).toBe(0);
      expect(await minorGcsBetween(() => noteStreamed(1024 * 1024))).toBe(1);
      expect(await minorGcsBetween(() => noteStreamed(64 * 1024))).toBe(0);
    } finally {
      delete process.env.KEYBROKER_IDLE_GC;
      tuneV8();
    }
  });

  it("collects a young generation at least half full once body bytes stop, not while they flow", () => {
    const youngFill = () => {
      const s = v8.getHeapSpaceStatistics().find((x) => x.space_name === "new_space")!;
      return s.space_used_size / (s.space_used_size + s.space_available_size);
    };
    // Garbage counts as used until a GC, and leaves nothing for the GC to copy.
    const sink: unknown[] = [undefined];
    const fillYoung = (to: number) => {
      while (youngFill() < to) for (let i = 0; i < 100; i++) sink[0] = { i };
    };
    // The clock is a fake one, and the test synchronous: nothing else allocates meanwhile.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      tuneV8();
      /**
       * A burst of 64 chunks (enough since the last look for the check to be armed; at once,
       * so that it is armed on a whole millisecond, as the fake clock counts its timers), then
       * a chunk every half millisecond for 50 ms: never a quiet moment.
       */
      const flow = () => {
        for (let i = 0; i < 64; i++) noteStreamed(1);
        for (let i = 0; i < 100; i++) {
          vi.advanceTimersByTime(0.5);
          noteStreamed(1);
        }
      };
      fillYoung(0.6);
      flow();
      expect(youngFill()).toBeGreaterThanOrEqual(0.6);
      // Quiet: the check that sees no chunk since its last turn (within two milliseconds) looks.
      vi.advanceTimersByTime(2);
      expect(youngFill()).toBeLessThan(0.1);

      /** `flow`, the young generation filled to `to` as the last chunk passes. */
      const flowInto = (to: number) => {
        flow();
        fillYoung(to);
        noteStreamed(1);
      };

      // Less than half full: nothing to do in the quiet moment.
      flowInto(0.4);
      vi.advanceTimersByTime(5);
      expect(youngFill()).toBeGreaterThanOrEqual(0.4);

      // One chunk since the last look: no look, however full (a broker serving one request at
      // a time is quiet after each).
      fillYoung(0.6);
      noteStreamed(1);
      vi.advanceTimersByTime(5);
      expect(youngFill()).toBeGreaterThanOrEqual(0.6);
      flowInto(0.6);
      vi.advanceTimersByTime(5);
      expect(youngFill()).toBeLessThan(0.1);

      // Switched off, for an A/B bench run (docs/performance.md).
      process.env.KEYBROKER_IDLE_GC = "off";
      tuneV8();
      flowInto(0.6);
      vi.advanceTimersByTime(5);
      expect(youngFill()).toBeGreaterThanOrEqual(0.6);
    } finally {
      delete process.env.KEYBROKER_IDLE_GC;
      tuneV8();
      vi.useRealTimers();
    }
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

  it("collects the old generation in smaller steps, so its heap stays smaller (decision 194)", async () => {
    // Objects that live through a few young collections (promoted) and then die, as a burst of
    // requests leaves them: the old generation's largest committed size and its collections,
    // in a process started with the flags `npm start` gives node.
    const script = `
      import(${JSON.stringify(join(ROOT, "dist/core/v8-tuning.js"))}).then(({ tuneV8 }) => {
        tuneV8();
        const v8 = require("node:v8");
        const { PerformanceObserver, constants } = require("node:perf_hooks");
        let majors = 0;
        new PerformanceObserver((list) => {
          for (const e of list.getEntries()) if (e.detail.kind === constants.NODE_PERFORMANCE_GC_MAJOR) majors++;
        }).observe({ entryTypes: ["gc"] });
        const window = new Array(20000);
        let largest = 0;
        for (let i = 0; i < 1000000; i++) {
          window[i % window.length] = { i, s: "x" + i, a: [i, i + 1] };
          if (i % 5000 === 0) largest = Math.max(largest, v8.getHeapStatistics().total_heap_size);
        }
        setTimeout(() => console.log(JSON.stringify({ largest, majors })), 10);
      });`;
    const base = { ...process.env };
    delete base.KEYBROKER_V8_FLAGS;
    delete base.KEYBROKER_V8_TUNING;
    const heapUnder = (env: Record<string, string>) =>
      new Promise<{ largest: number; majors: number; stderr: string }>((resolve, reject) => {
        execFile(
          process.execPath,
          [...NODE_FLAGS, "-e", script],
          { env: { ...base, ...env } },
          (err, stdout, stderr) => (err ? reject(err) : resolve({ ...JSON.parse(stdout), stderr })),
        );
      });
    const [tuned, without] = await Promise.all([
      heapUnder({}),
      heapUnder({ KEYBROKER_V8_FLAGS: V8_FLAGS.filter((f) => f !== "--optimize-for-size").join(" ") }),
    ]);
    expect(tuned.stderr).toBe("");
    expect(without.majors).toBeGreaterThan(0);
    // Measured on Node 20: 25 MiB against 31-33, 12-14 collections against 9.
    expect(tuned.majors).toBeGreaterThan(without.majors);
    expect(tuned.largest).toBeLessThan(without.largest - 2 * 1024 * 1024);
  });

  describe("node's own flags (decision 183)", () => {
    const launch = {
      execPath: "/usr/bin/node",
      execArgv: [] as string[],
      argv: ["/usr/bin/node", "/usr/lib/node_modules/keybroker/dist/cli/main.js", "start", "--port", "0"],
      env: {} as NodeJS.ProcessEnv,
      platform: "linux",
    };

    it("chooses the flags and environment by V8's version (decision 187)", () => {
      const node20 = {
        flags: ["--max-semi-space-size=2", "--single-threaded-gc", "--no-node-snapshot"],
        env: {},
      };
      expect(tuningFor(11)).toEqual(node20);
      expect(tuningFor(12)).toEqual(node20);
      expect(tuningFor(13)).toEqual({
        flags: ["--max-semi-space-size=2", "--no-node-snapshot"],
        env: { MALLOC_ARENA_MAX: "1" },
      });
      expect(NODE_FLAGS).toEqual(tuningFor(Number(process.versions.v8.split(".")[0])).flags);
    });

    it("starts the same command again with the flags when node ran without them", () => {
      const node20 = tuningFor(11);
      expect(tunedLaunch(launch, node20)).toEqual({
        args: [
          "/usr/bin/node",
          "--max-semi-space-size=2",
          "--single-threaded-gc",
          "--no-node-snapshot",
          "/usr/lib/node_modules/keybroker/dist/cli/main.js",
          "start",
          "--port",
          "0",
        ],
        env: {},
      });
      // The user's own node flags go along, after ours.
      expect(tunedLaunch({ ...launch, execArgv: ["--inspect"] }, node20)?.args.slice(1, 6)).toEqual([
        ...node20.flags,
        "--inspect",
        "/usr/lib/node_modules/keybroker/dist/cli/main.js",
      ]);
    });

    it("adds Node 24's environment, marked so that the new process can forget it; a value the user set stands", () => {
      const node24 = tuningFor(13);
      const env = { HOME: "/home/u", PATH: "/usr/bin" };
      const relaunch = tunedLaunch({ ...launch, env }, node24)!;
      expect(relaunch.args.slice(1, 4)).toEqual([
        "--max-semi-space-size=2",
        "--no-node-snapshot",
        "/usr/lib/node_modules/keybroker/dist/cli/main.js",
      ]);
      expect(relaunch.env).toEqual({
        ...env,
        MALLOC_ARENA_MAX: "1",
        KEYBROKER_LAUNCH_ENV: "MALLOC_ARENA_MAX",
      });
      expect(env).toEqual({ HOME: "/home/u", PATH: "/usr/bin" }); // a copy, not the process's own
      // The launched process: what the launch added goes, the rest stays.
      forgetLaunchEnv(relaunch.env);
      expect(relaunch.env).toEqual(env);
      // The user's own MALLOC_ARENA_MAX is kept, and not forgotten.
      const own = tunedLaunch({ ...launch, env: { ...env, MALLOC_ARENA_MAX: "4" } }, node24)!;
      expect(own.env).toEqual({ ...env, MALLOC_ARENA_MAX: "4" });
      forgetLaunchEnv(own.env);
      expect(own.env.MALLOC_ARENA_MAX).toBe("4");
    });

    it("npm start gives node the flags where it cannot relaunch itself, and leaves them to the relaunch where it can", async () => {
      const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
        scripts: { start: string };
      };
      expect(pkg.scripts.start).toBe("exec node $(node scripts/node-flags.mjs) dist/cli/main.js start");
      const printed = await new Promise<string>((resolve, reject) =>
        execFile(process.execPath, [join(ROOT, "scripts/node-flags.mjs")], (err, stdout) =>
          err ? reject(err) : resolve(stdout),
        ),
      );
      const canRelaunch = typeof (process as { execve?: unknown }).execve === "function";
      expect(printed).toBe(`${canRelaunch ? "" : NODE_FLAGS.join(" ")}\n`);
    });

    it("leaves a process alone that has either flag, has tuning off, or runs on Windows", () => {
      expect(tunedLaunch({ ...launch, execArgv: ["--max-semi-space-size=2", "--single-threaded-gc"] })).toBe(
        undefined,
      );
      expect(tunedLaunch({ ...launch, execArgv: ["--max-semi-space-size", "8"] })).toBe(undefined);
      expect(tunedLaunch({ ...launch, execArgv: ["--max_semi_space_size=8"] })).toBe(undefined);
      expect(tunedLaunch({ ...launch, execArgv: ["--single-threaded-gc"] })).toBe(undefined);
      expect(tunedLaunch({ ...launch, env: { NODE_OPTIONS: "--max-semi-space-size=16" } })).toBe(undefined);
      expect(tunedLaunch({ ...launch, env: { KEYBROKER_V8_TUNING: "off" } })).toBe(undefined);
      expect(tunedLaunch({ ...launch, platform: "win32" })).toBe(undefined);
    });

    it("replaces the process through process.execve where node has it, with the environment as it is", async () => {
      // Node 20 has no process.execve: a stand-in records the call (on Node 22.15+ and 24 the
      // real one replaced the process, same pid, in the check recorded in decision 183).
      const script = `
        process.execve = function (file, args, env) {
          console.log(JSON.stringify({ self: this === process, file, args, marker: env.KB_RELAUNCH_MARK }));
          process.exit(7);
        };
        import(${JSON.stringify(join(ROOT, "dist/core/v8-tuning.js"))}).then(({ relaunchTuned }) => {
          relaunchTuned();
          const env = (k) => process.env[k] ?? "-";
          console.log("not relaunched", env("MALLOC_ARENA_MAX"), env("KEYBROKER_LAUNCH_ENV"));
        });`;
      const run = (args: string[], env: Record<string, string>) =>
        new Promise<{ code: number | null; stdout: string }>((resolve) => {
          const base = { ...process.env };
          delete base.KEYBROKER_V8_TUNING;
          delete base.NODE_OPTIONS;
          execFile(
            process.execPath,
            [...args, "-e", script, "--", "start"],
            { env: { ...base, ...env } },
            (err, stdout) => resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stdout }),
          );
        });
      const bare = await run([], { KB_RELAUNCH_MARK: "m1" });
      expect(bare.code).toBe(7);
      const call = JSON.parse(bare.stdout) as { self: boolean; file: string; args: string[]; marker: string };
      expect(call).toMatchObject({ self: true, file: process.execPath, marker: "m1" });
      expect(call.args.slice(0, 1 + NODE_FLAGS.length)).toEqual([process.execPath, ...NODE_FLAGS]);
      const tuned = await run([...NODE_FLAGS], {});
      expect(tuned).toEqual({ code: 0, stdout: "not relaunched - -\n" });
      const off = await run([], { KEYBROKER_V8_TUNING: "off" });
      expect(off).toEqual({ code: 0, stdout: "not relaunched - -\n" });
      // A launched process forgets what its launch added, so that what it starts does not get it;
      // the user's own setting stays.
      const launched = await run([...NODE_FLAGS], {
        MALLOC_ARENA_MAX: "1",
        KEYBROKER_LAUNCH_ENV: "MALLOC_ARENA_MAX",
      });
      expect(launched).toEqual({ code: 0, stdout: "not relaunched - -\n" });
      const users = await run([...NODE_FLAGS], { MALLOC_ARENA_MAX: "2" });
      expect(users).toEqual({ code: 0, stdout: "not relaunched 2 -\n" });
    });
  });
});
