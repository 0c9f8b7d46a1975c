// Small numeric helpers shared by the scenarios.

/** Nearest-rank percentile of an ascending-sorted array (null when empty). */
export function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
}

/** p50 / p99 / max / n of a list of millisecond samples. */
export function summarize(samples) {
  const s = Float64Array.from(samples).sort();
  return {
    n: s.length,
    p50: percentile(s, 50),
    p99: percentile(s, 99),
    max: s.length ? s[s.length - 1] : null,
  };
}

export const median = (samples) => summarize(samples).p50;

/** Milliseconds on the process's monotonic clock (performance.now). */
export const nowMs = () => performance.now();

/** Milliseconds on CLOCK_MONOTONIC, which every process on the machine shares. */
export const sharedClockMs = () => Number(process.hrtime.bigint()) / 1e6;

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
