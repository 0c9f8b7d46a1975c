// Pool marks as brokers share them (docs/spec.md §7, §17, decision 112): the one merge rule, and the
// check a mark read from elsewhere must pass. Every mark store (store.ts) and the pool itself
// combine two marks with `mergeMark` only.

/** A mark as the brokers of a fleet share it (docs/spec.md §17): no counters, no local pins. */
export interface SharedMark {
  readonly state: "usage_limit_reached" | "invalid";
  readonly until?: number;
  readonly reason?: string;
  readonly fingerprint?: string;
  /** When it was made or last extended: one made before a reset the broker knows is not taken in (decisions 113, 137). */
  readonly markedAt?: number;
}

/** Longest reason or fingerprint a mark read from elsewhere may carry (ours are far shorter). */
const MAX_TEXT = 200;

/**
 * The mark to keep when `incoming` meets `held` (either may be absent): extend-only. A refusal
 * (`invalid`) wins over a usage mark and a newer refusal's fingerprint replaces the older one;
 * a usage mark replaces only a shorter or lapsed one and never a refusal; a lapsed usage mark
 * never replaces anything. Returns `held` itself (the same object) when nothing changes.
 */
export function mergeMark(
  held: SharedMark | undefined,
  incoming: SharedMark,
  now: number,
): SharedMark | undefined {
  if (incoming.state === "invalid") {
    return held?.state === "invalid" && held.fingerprint === incoming.fingerprint ? held : incoming;
  }
  if (held?.state === "invalid") return held;
  if (incoming.until === undefined || incoming.until <= now) return held;
  if (held?.until !== undefined && held.until > now && held.until >= incoming.until) return held;
  return incoming;
}

/** A mark read from another store or broker, checked field by field; undefined when malformed. */
export function readMark(value: unknown): SharedMark | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const v = value as Record<string, unknown>;
  if (v.state !== "usage_limit_reached" && v.state !== "invalid") return undefined;
  const text = (x: unknown) => x === undefined || (typeof x === "string" && x.length <= MAX_TEXT);
  if (!text(v.reason) || !text(v.fingerprint)) return undefined;
  if (v.until !== undefined && !(typeof v.until === "number" && Number.isSafeInteger(v.until) && v.until > 0))
    return undefined;
  if (v.state === "usage_limit_reached" && v.until === undefined) return undefined;
  if (v.markedAt !== undefined && !(typeof v.markedAt === "number" && Number.isSafeInteger(v.markedAt)))
    return undefined;
  return {
    state: v.state,
    ...(v.until === undefined ? {} : { until: v.until as number }),
    ...(v.reason === undefined ? {} : { reason: v.reason as string }),
    ...(v.fingerprint === undefined ? {} : { fingerprint: v.fingerprint as string }),
    ...(v.markedAt === undefined ? {} : { markedAt: v.markedAt as number }),
  };
}
