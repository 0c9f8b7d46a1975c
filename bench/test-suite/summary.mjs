// Sums up a measured run of the suite: wall time and the sum of the files' durations from
// vitest's JSON report, and the child processes each file started from the counter's log.
// Usage: node bench/test-suite/summary.mjs <report.json> <count.log> [files to list]
import { readFileSync } from "node:fs";

const [reportPath, countPath, top = "15"] = process.argv.slice(2);
const report = JSON.parse(readFileSync(reportPath, "utf8"));
const files = report.testResults.map((r) => ({
  file: r.name.replace(/.*\/test\//, "test/"),
  seconds: (r.endTime - r.startTime) / 1000,
}));
const starts = new Map();
const totals = { broker: 0, cli: 0, env: 0, other: 0 };
for (const line of readFileSync(countPath, "utf8").split("\n")) {
  if (line === "") continue;
  const parts = line.split("\t");
  const [file, kind] = [parts[0], parts.at(-1)];
  const k = kind.startsWith("broker-start") ? "broker" : kind.startsWith("cli:") ? "cli" : "other";
  const c = starts.get(file) ?? { broker: 0, cli: 0, env: 0, other: 0 };
  c[k]++;
  totals[k]++;
  if (kind === "cli:env") {
    c.env++;
    totals.env++;
  }
  starts.set(file, c);
}
const first = Math.min(...report.testResults.map((r) => r.startTime));
const last = Math.max(...report.testResults.map((r) => r.endTime));
const sum = files.reduce((s, f) => s + f.seconds, 0);
console.log(
  `tests ${report.numPassedTests}/${report.numTotalTests} passed, ${report.numFailedTests} failed; ` +
    `files ${files.length}; first file start to last file end ${((last - first) / 1000).toFixed(0)} s; ` +
    `sum of file durations ${sum.toFixed(0)} s`,
);
console.log(
  `broker starts ${totals.broker}, CLI spawns ${totals.cli} (keybroker env ${totals.env}), other programs ${totals.other}`,
);
for (const f of files.sort((a, b) => b.seconds - a.seconds).slice(0, Number(top))) {
  const c = starts.get(f.file) ?? { broker: 0, cli: 0, env: 0 };
  console.log(
    `${f.seconds.toFixed(1).padStart(7)} s  ${f.file}  brokers ${c.broker}, cli ${c.cli} (env ${c.env})`,
  );
}
