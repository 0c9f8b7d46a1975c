// V8 settings for a long-running broker, chosen with `npm run bench` and the peer harness
// (docs/performance.md, decisions 25 and 29). They trade about 10 % more CPU per request for a
// peak memory about 60 MiB lower, and reach optimized code sooner after start-up:
//
//   --liftoff-only           undici parses HTTP with llhttp compiled to WebAssembly. Optimizing
//                            that one large function with TurboFan, on the first upstream request,
//                            briefly takes 8 MiB (35 MiB with node's default young generation);
//                            the baseline compiler's code is enough.
//   --heap-growing-percent   V8 lets the old generation grow to several times its live size
//                            before a full GC: under load, objects promoted out of the young
//                            generation piled up to about 40 MiB of garbage. 25 % keeps it near
//                            the live size.
//   --interrupt-budget (Node 20) or --invocation-count-for-turbofan (Node 22), and
//   --minimum-invocations-after-ic-update
//                            how much a function must run before TurboFan optimizes it. With
//                            V8's defaults a request's path is still mostly interpreted after
//                            2,000 requests and costs 3-5x its optimized CPU; a quarter of the
//                            budget gets there in about 800. The steady state is unchanged.
//                            Not on Node 24, whose Maglev tier gets there by itself.
//   --optimize-for-size      V8's heap in its memory-saving mode: the old generation's limit
//                            grows by 2 MiB steps instead of 8, and its collections compact
//                            more. 5-6 MiB off the peak under load on Node 20, 2-4 on Node 22
//                            and 24, for no more instructions a request (decision 194). Set once the heap
//                            exists, it leaves the young generation's size to node's command
//                            line (decision 183).
//
// All are read when used, so setting them at start-up works. The young generation's size is
// fixed when the process starts: `npm start` and bench/peer-extra.sh pass NODE_FLAGS on node's
// command line, and `start` relaunches itself with them where node can (decision 183; turning
// the GC's threads off here instead, once the heap exists, stops node with a fatal V8 check).
import v8 from "node:v8";
import vm from "node:vm";

const V8_MAJOR = Number(process.versions.v8.split(".")[0]);

/**
 * A quarter of V8's tier-up budget, where it helps. V8 12 (Node 22) replaced the fixed interrupt
 * budget of V8 11 (Node 20: 66 KiB of bytecode) by a count of invocations (3,000), and a flag V8
 * does not know is refused with an error on stderr, so each gets its own. From V8 13 (Node 24)
 * Maglev is on and reaches fast code within about 1,200 requests by itself; lowering TurboFan's
 * count there only added compile work, so it is left alone.
 */
export const TIER_UP_FLAGS: readonly string[] =
  V8_MAJOR >= 13
    ? []
    : [
        V8_MAJOR === 12 ? "--invocation-count-for-turbofan=750" : "--interrupt-budget=16384",
        "--minimum-invocations-after-ic-update=100",
      ];

export const V8_FLAGS: readonly string[] = [
  "--liftoff-only",
  "--heap-growing-percent=25",
  ...TIER_UP_FLAGS,
  "--optimize-for-size",
];

/** How `keybroker start` tunes node where the settings must be in place when node starts. */
export interface LaunchTuning {
  /**
   * Flags that only node's command line can set (decision 183): the young generation's size is
   * fixed when the heap is made, and `--single-threaded-gc` is refused by NODE_OPTIONS.
   */
  readonly flags: readonly string[];
  /** Environment glibc reads when the process starts (musl ignores it). */
  readonly env: Readonly<Record<string, string>>;
}

/**
 * The tuning for a V8 major version (decision 187). Node 20 and 22: a 2 MiB young generation
 * and the GC on the main thread. Node 24 (V8 13) keeps more of its freed heap pages resident
 * with the GC on the main thread than with its helper threads (174 against 136 MiB at peak
 * under the peer harness's load), and its compiler threads each kept a glibc arena of what
 * their compiles had allocated (136 against 120 MiB with one arena): the young generation's
 * size and `MALLOC_ARENA_MAX=1`. On all three, node's own start-up snapshot is left out
 * (decision 197): every young-generation collection walks the snapshot's object cache, about
 * 8,000 instructions a request on Node 20, and the broker holds 2-5 MiB less without it, for
 * about 40 ms more at start.
 */
export function tuningFor(v8Major: number): LaunchTuning {
  return v8Major >= 13
    ? { flags: ["--max-semi-space-size=2", "--no-node-snapshot"], env: { MALLOC_ARENA_MAX: "1" } }
    : { flags: ["--max-semi-space-size=2", "--single-threaded-gc", "--no-node-snapshot"], env: {} };
}

const TUNING = tuningFor(V8_MAJOR);
export const NODE_FLAGS: readonly string[] = TUNING.flags;
export const LAUNCH_ENV: Readonly<Record<string, string>> = TUNING.env;
/**
 * Names the variables of LAUNCH_ENV that a launch added (those the user had not set), so that
 * the launched process can remove them again (`forgetLaunchEnv`): the programs the broker
 * starts get the user's environment.
 */
const LAUNCH_ENV_MARK = "KEYBROKER_LAUNCH_ENV";

/** What `tunedLaunch` reads of the process. */
export interface ProcessLaunch {
  readonly execPath: string;
  readonly execArgv: readonly string[];
  readonly argv: readonly string[];
  readonly env: NodeJS.ProcessEnv;
  readonly platform: string;
}

/**
 * The command line and environment that start this process again with the tuning's flags and
 * environment, or undefined when it needs none: tuning is off, or node's command line or
 * NODE_OPTIONS already gives one of the flags (the user's choice stands, and a relaunched process
 * finds its own flags there).
 */
export function tunedLaunch(
  p: ProcessLaunch,
  tuning: LaunchTuning = TUNING,
): { args: string[]; env: NodeJS.ProcessEnv } | undefined {
  if (p.env.KEYBROKER_V8_TUNING === "off" || p.platform === "win32" || p.argv.length < 2) return undefined;
  const given = [...p.execArgv, ...(p.env.NODE_OPTIONS ?? "").split(/\s+/)].map((f) =>
    f.replaceAll("_", "-"),
  );
  if (given.some((f) => f.startsWith("--max-semi-space-size") || f === "--single-threaded-gc"))
    return undefined;
  const env: NodeJS.ProcessEnv = { ...p.env };
  const added = Object.keys(tuning.env).filter((k) => p.env[k] === undefined);
  for (const k of added) env[k] = tuning.env[k];
  if (added.length > 0) env[LAUNCH_ENV_MARK] = added.join(",");
  return { args: [p.execPath, ...tuning.flags, ...p.execArgv, ...p.argv.slice(1)], env };
}

/**
 * Removes from process.env what a tuned launch added to it (LAUNCH_ENV_MARK lists it): the
 * process has read it already, and the programs it starts should get the user's environment.
 */
export function forgetLaunchEnv(env: NodeJS.ProcessEnv = process.env): void {
  const mark = env[LAUNCH_ENV_MARK];
  if (mark === undefined) return;
  for (const k of mark.split(",")) delete env[k];
  delete env[LAUNCH_ENV_MARK];
}

type Execve = (file: string, args: readonly string[], env: NodeJS.ProcessEnv) => never;

/**
 * `keybroker start` run without NODE_FLAGS (an installed command, `npx`) replaces itself with
 * the same command under them and LAUNCH_ENV, where node can (`process.execve`, Node 22.15 and
 * later): the same pid, terminal and environment, nothing opened yet. On Node 20 it goes on with
 * node's defaults (docs/install.md gives the command line). A launched process forgets
 * LAUNCH_ENV here.
 */
export function relaunchTuned(): void {
  const execve = (process as unknown as { execve?: Execve }).execve;
  if (typeof execve === "function") {
    const launch = tunedLaunch(process);
    if (launch !== undefined) {
      try {
        execve.call(process, process.execPath, launch.args, launch.env);
      } catch {
        // The exec itself failed: this process goes on, untuned.
      }
    }
  }
  forgetLaunchEnv();
}

/** Streamed body bytes between two young-generation GCs (see `noteStreamed`). */
const STREAMED_GC_BYTES = 2 * 1024 * 1024;

let minorGc: (() => void) | undefined;
let streamed = 0;

/** Applies the flags above; call it before the first upstream request. */
export function tuneV8(): void {
  if (process.env.KEYBROKER_V8_TUNING === "off") return;
  const flags = process.env.KEYBROKER_V8_FLAGS?.split(/\s+/).filter(Boolean) ?? V8_FLAGS;
  for (const flag of flags) v8.setFlagsFromString(flag);
  // A received chunk's memory (an ArrayBuffer outside V8's heap) is freed only when a GC finds
  // it dead, and young-generation GCs are triggered by JavaScript allocation, not by those
  // bytes. A download allocates little JavaScript per MiB, so dead chunks piled up to about
  // 35 MiB before V8 noticed. A young-generation GC after every few MiB streamed bounds that.
  v8.setFlagsFromString("--expose-gc");
  const gc = vm.runInNewContext("gc") as (options?: { type: "minor" | "major" }) => void;
  minorGc = () => gc({ type: "minor" });
  idleGc = process.env.KEYBROKER_IDLE_GC !== "off";
  // A fresh idle check: its timer is made again on first use.
  clearTimeout(idleTimer);
  idleTimer = undefined;
  idleArmed = false;
}

/**
 * One full GC once start-up is done. The old generation's first limit is a fixed size much
 * larger than the broker's live heap, and `--heap-growing-percent` only applies from the first
 * full GC on: without this one, the first burst of load grew the heap by about 20 MiB first.
 */
export function settleHeap(): void {
  if (minorGc === undefined) return;
  (vm.runInNewContext("gc") as () => void)();
}

/**
 * Gives back the heap a burst of work grew: full GCs now and once more a second later. V8 frees
 * dead objects on the first, but returns the pages (and the young generation's grown
 * semi-spaces) only on later ones; a single gc() left the heap's committed size where it was
 * (decision 55). Each costs a few milliseconds on the broker's heap, so this is for rare moments
 * such as the end of a connection flood.
 */
export function releaseHeap(): void {
  if (minorGc === undefined) return;
  const gc = vm.runInNewContext("gc") as () => void;
  gc();
  gc();
  setTimeout(() => gc(), 1000).unref();
}

/** How long the broker must have passed no body bytes before `idleCheck` looks at the heap. */
const QUIET_MS = 1;
/** How full the young generation must be for a GC in a quiet moment. */
const IDLE_GC_FILL = 0.5;
/**
 * Body chunks that must have passed since the last look at the heap before the check is armed
 * again: a timer that fires costs about as much as a small request's own work in the broker,
 * and a broker serving one request at a time is quiet after each of them.
 */
const IDLE_CHECK_CHUNKS = 64;
/** Body chunks passed through, the count `idleCheck` saw last, and the count at its last look. */
let activity = 0;
let seenActivity = 0;
let lookedAt = 0;
/** One timer, re-armed with `refresh` (a new one per quiet moment costs more than the check). */
let idleTimer: NodeJS.Timeout | undefined;
let idleArmed = false;
/** KEYBROKER_IDLE_GC=off leaves every young-generation GC to V8 (for A/B bench runs). */
let idleGc = true;

/**
 * Counts body bytes passed through; runs a young-generation GC every few MiB, and arms the
 * check that runs one in the next quiet moment instead of in the middle of a burst.
 */
export function noteStreamed(bytes: number): void {
  if (minorGc === undefined) return;
  activity++;
  if (!idleArmed && idleGc && activity - lookedAt >= IDLE_CHECK_CHUNKS) armIdleCheck();
  streamed += bytes;
  if (streamed < STREAMED_GC_BYTES) return;
  streamed = 0;
  minorGc();
}

function armIdleCheck(): void {
  seenActivity = activity;
  idleArmed = true;
  if (idleTimer !== undefined) {
    idleTimer.refresh();
    return;
  }
  idleTimer = setTimeout(idleCheck, QUIET_MS);
  idleTimer.unref();
}

/**
 * V8 collects the young generation when an allocation finds it full, which is in the middle of
 * the work that allocates: with 20 streams whose chunks arrive together, a collection of 0.5-1.5
 * ms held back every chunk behind it, and those set the streams' tail latency (decision 186).
 * Once no body bytes have passed for QUIET_MS, a young generation at least half full is collected
 * there, where nothing waits for it. Under steady load the broker is never quiet that long, and
 * nothing changes.
 */
function idleCheck(): void {
  if (activity !== seenActivity) {
    seenActivity = activity;
    idleTimer!.refresh();
    return;
  }
  idleArmed = false;
  lookedAt = activity;
  const young = v8.getHeapSpaceStatistics().find((s) => s.space_name === "new_space");
  if (young === undefined) return;
  const fill = young.space_used_size / (young.space_used_size + young.space_available_size);
  if (fill < IDLE_GC_FILL) return;
  streamed = 0;
  minorGc!();
}
