// What the overhead histogram counts: a request's time less its upstream time and less the time
// it was held for a person's answer (an approval wait is nobody's overhead).
import { describe, expect, it } from "vitest";
import { BrokerMetrics } from "../../../metrics/broker-metrics.js";
import type { Exchange } from "../../../proxy/exchange.js";

describe("BrokerMetrics.request", () => {
  it("leaves the wait for an approval out of the broker's overhead", () => {
    const metrics = new BrokerMetrics();
    const now = performance.now();
    const held = {
      provider: { rule: { id: "github" } },
      client: { rule: { name: "default" } },
      startedAt: now - 5_000,
      upstreamMs: 40,
      heldMs: 4_950,
    } as unknown as Exchange;
    metrics.request(held, "injected", 200, undefined, { bytesIn: 10, bytesOut: 5 });
    const [cell] = [...metrics.timingCells()];
    expect(cell!.provider).toBe("github");
    expect(cell!.upstream.sumMs).toBe(40);
    // About 10 ms of the 5 s were the broker's (plus the few µs this test takes).
    expect(cell!.overhead.sumMs).toBeGreaterThanOrEqual(10);
    expect(cell!.overhead.sumMs).toBeLessThan(1_000);
  });
});
