// What the request path counts for /metrics: plain numbers in cells found by Map lookups on the
// ids the rules already hold, so a request builds no label string and no label object. The
// Prometheus side (metrics/registry.ts) reads the cells when it is scraped.

/** Status classes, in the order of `RequestCell.byClass`; `none`: no answer status (the client left). */
export const STATUS_CLASSES = ["1xx", "2xx", "3xx", "4xx", "5xx", "none"] as const;

export function statusClassIndex(status: number): number {
  const c = Math.trunc(status / 100);
  return c >= 1 && c <= 5 ? c - 1 : 5;
}

/** A histogram's buckets: upper bounds in milliseconds, one count per bound plus +Inf. */
export class Buckets {
  readonly boundsMs: Float64Array;
  readonly counts: Float64Array;
  sumMs = 0;
  count = 0;

  constructor(boundsMs: readonly number[]) {
    this.boundsMs = Float64Array.from(boundsMs);
    this.counts = new Float64Array(boundsMs.length + 1);
  }

  observe(ms: number): void {
    const bounds = this.boundsMs;
    let i = 0;
    while (i < bounds.length && ms > bounds[i]!) i++;
    this.counts[i]!++;
    this.sumMs += ms;
    this.count++;
  }
}

/** Requests and bytes of one client toward one provider ("" when no provider matched). */
export interface TrafficCell {
  readonly client: string;
  readonly provider: string;
  /** decision → counts by status class (STATUS_CLASSES order). */
  readonly decisions: Map<string, Float64Array>;
  bytesIn: number;
  bytesOut: number;
}

/** Counts by a fixed list of label values, in nested Maps: no key string is built to find one. */
export class LabelledCounts {
  readonly labelNames: readonly string[];
  readonly #root = new Map<string, unknown>();

  constructor(labelNames: readonly string[]) {
    this.labelNames = labelNames;
  }

  add(values: readonly string[], n = 1): void {
    let map = this.#root;
    const last = values.length - 1;
    for (let i = 0; i < last; i++) {
      let next = map.get(values[i]!) as Map<string, unknown> | undefined;
      if (next === undefined) {
        next = new Map();
        map.set(values[i]!, next);
      }
      map = next;
    }
    map.set(values[last]!, ((map.get(values[last]!) as number | undefined) ?? 0) + n);
  }

  /** Every cell as its label values and count (for a scrape). */
  *entries(): Generator<[string[], number]> {
    const depth = this.labelNames.length;
    function* walk(map: Map<string, unknown>, prefix: string[]): Generator<[string[], number]> {
      for (const [key, value] of map) {
        if (prefix.length + 1 === depth) yield [[...prefix, key], value as number];
        else yield* walk(value as Map<string, unknown>, [...prefix, key]);
      }
    }
    yield* walk(this.#root, []);
  }
}
