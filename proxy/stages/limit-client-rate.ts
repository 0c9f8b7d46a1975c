// docs/spec.md §16: `limits: { rpm: N }` caps a client's requests per minute; beyond it, 429
// client_rate_limited with `retry-after`. A sliding window in memory: the times of the client's
// last N requests in a ring, so a request costs one array read and write and no timer; clients
// without a cap skip it at the first test. Counts kept across reloads while the cap is unchanged.
import { BrokerError } from "../../core/errors.js";
import type { Exchange } from "../exchange.js";

const WINDOW_MS = 60_000;

interface Ring {
  /** The times (epoch ms) of the last `length` requests; 0 = none yet. */
  readonly times: Float64Array;
  next: number;
}

export function createLimitClientRate(): (x: Exchange) => void {
  const rings = new Map<string, Ring>();
  return function limitClientRate(x) {
    const rpm = x.client.rule.rpm;
    if (rpm === undefined) return;
    const name = x.client.rule.name;
    let ring = rings.get(name);
    if (ring === undefined || ring.times.length !== rpm) {
      ring = { times: new Float64Array(rpm), next: 0 };
      rings.set(name, ring);
    }
    const now = Date.now();
    const oldest = ring.times[ring.next]!;
    if (now - oldest < WINDOW_MS) {
      const seconds = Math.max(1, Math.ceil((oldest + WINDOW_MS - now) / 1000));
      throw new BrokerError(
        "client_rate_limited",
        `client "${name}" made ${rpm} requests in the last minute, its limit (clients.${name}.limits.rpm)`,
        {
          hint: `retry after ${seconds} s, or raise clients.${name}.limits.rpm`,
          headers: { "retry-after": String(seconds) },
        },
      );
    }
    ring.times[ring.next] = now;
    ring.next = (ring.next + 1) % rpm;
  };
}
