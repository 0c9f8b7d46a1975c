// Usage per client and provider over the last 24 h, for the admin page: counters in memory,
// bucketed by hour (24 buckets per pair), bumped once per request — no disk, no allocation
// beyond a pair's first request of an hour.
export const HOUR_MS = 60 * 60 * 1000;
const HOURS = 24;

export interface UsageCounts {
  requests: number;
  errors: number;
  blocked: number;
  bytes: number;
}

interface Bucket extends UsageCounts {
  hour: number;
}

export interface UsageRow extends UsageCounts {
  readonly client: string;
  readonly provider: string;
  /** Requests per hour, oldest first, the current hour last (24 numbers). */
  readonly hourly: readonly number[];
}

interface Pair {
  readonly client: string;
  readonly provider: string;
  readonly buckets: Bucket[];
}

export class Usage {
  /** client → provider (`-` for none) → its hourly buckets: no key string built per request. */
  readonly #pairs = new Map<string, Map<string, Pair>>();

  /** One request: `blocked` when the broker refused it, an error when the answer was ≥ 400. */
  count(
    client: string,
    provider: string | undefined,
    status: number,
    blocked: boolean,
    bytes: number,
    now = Date.now(),
  ): void {
    const p = provider ?? "-";
    let byProvider = this.#pairs.get(client);
    if (byProvider === undefined) {
      byProvider = new Map();
      this.#pairs.set(client, byProvider);
    }
    let pair = byProvider.get(p);
    if (pair === undefined) {
      pair = { client, provider: p, buckets: [] };
      byProvider.set(p, pair);
    }
    const hour = Math.floor(now / HOUR_MS);
    let b = pair.buckets[hour % HOURS];
    if (b === undefined || b.hour !== hour) {
      b = { hour, requests: 0, errors: 0, blocked: 0, bytes: 0 };
      pair.buckets[hour % HOURS] = b;
    }
    b.requests++;
    if (blocked) b.blocked++;
    else if (status >= 400) b.errors++;
    b.bytes += bytes;
  }

  /** Each pair with requests in the last 24 h, busiest first. */
  rows(now = Date.now()): UsageRow[] {
    const current = Math.floor(now / HOUR_MS);
    const out: UsageRow[] = [];
    for (const [client, byProvider] of this.#pairs) {
      for (const [provider, pair] of byProvider) {
        const sum: UsageCounts = { requests: 0, errors: 0, blocked: 0, bytes: 0 };
        const hourly = new Array<number>(HOURS).fill(0);
        for (const b of pair.buckets) {
          if (b === undefined || current - b.hour >= HOURS) continue;
          sum.requests += b.requests;
          sum.errors += b.errors;
          sum.blocked += b.blocked;
          sum.bytes += b.bytes;
          hourly[HOURS - 1 - (current - b.hour)] = b.requests;
        }
        if (sum.requests === 0) {
          byProvider.delete(provider);
          continue;
        }
        out.push({ client: pair.client, provider: pair.provider, hourly, ...sum });
      }
      if (byProvider.size === 0) this.#pairs.delete(client);
    }
    return out.sort((a, b) => b.requests - a.requests);
  }
}
