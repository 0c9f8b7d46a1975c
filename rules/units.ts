// Durations and sizes as the rule file writes them.

const DURATION = /^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)$/;
const DURATION_UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 } as const;

/** `"500ms"`, `"60s"`, `"5m"`, `"1h"`, or a number of seconds → milliseconds; undefined if invalid. */
export function parseDuration(value: string | number): number | undefined {
  if (typeof value === "number")
    return Number.isFinite(value) && value >= 0 ? Math.round(value * 1000) : undefined;
  const match = DURATION.exec(value.trim());
  if (!match) return undefined;
  const unit = match[2] as keyof typeof DURATION_UNIT_MS;
  return Math.round(Number(match[1]) * DURATION_UNIT_MS[unit]);
}

const SIZE = /^([0-9]+(?:\.[0-9]+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)?$/;
const SIZE_UNIT = { B: 1, KB: 1e3, MB: 1e6, GB: 1e9, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3 } as const;

/** `"4MiB"`, `"512KiB"`, `"1MB"`, or a number of bytes → bytes; undefined if invalid. */
export function parseByteSize(value: string | number): number | undefined {
  if (typeof value === "number") return Number.isSafeInteger(value) && value >= 0 ? value : undefined;
  const match = SIZE.exec(value.trim());
  if (!match) return undefined;
  const unit = (match[2] ?? "B") as keyof typeof SIZE_UNIT;
  return Math.round(Number(match[1]) * SIZE_UNIT[unit]);
}
