// Preload for a broker under study (docs/reliability.md, "Memory after a flood"):
//
//   PROBE_OUT=/tmp/probe.jsonl node --import ./bench/memory-probe.mjs --expose-gc dist/cli/main.js start ...
//   kill -USR2 <pid>          # appends one JSON line: RSS, V8 heap, external, anonymous memory
//   touch /tmp/probe.jsonl.gc # the next signal runs three full GCs first and reports 1.5 s later
//
// The allocator's share can then be seen by `gdb -p <pid> -batch -ex 'call (int)malloc_trim(0)'`
// and one more signal.
import fs from "node:fs";
import v8 from "node:v8";

const out = process.env.PROBE_OUT ?? "/tmp/keybroker-probe.jsonl";
const mib = (bytes) => +(bytes / 1048576).toFixed(1);

function report(gc) {
  const m = process.memoryUsage();
  const smaps = fs.readFileSync("/proc/self/smaps_rollup", "utf8");
  const anonKiB = Number(/^Anonymous:\s+(\d+)/m.exec(smaps)?.[1]);
  const spaces = Object.fromEntries(
    v8.getHeapSpaceStatistics().map((s) => [s.space_name, mib(s.space_used_size)]),
  );
  const line = {
    t: Date.now(),
    gc,
    rss: mib(m.rss),
    heapTotal: mib(m.heapTotal),
    heapUsed: mib(m.heapUsed),
    external: mib(m.external),
    arrayBuffers: mib(m.arrayBuffers),
    anon: +(anonKiB / 1024).toFixed(1),
    spaces,
  };
  fs.appendFileSync(out, `${JSON.stringify(line)}\n`);
}

process.on("SIGUSR2", () => {
  const gc = fs.existsSync(`${out}.gc`) && typeof globalThis.gc === "function";
  if (!gc) return report(false);
  for (let i = 0; i < 3; i++) globalThis.gc();
  setTimeout(report, 1500, true);
});
