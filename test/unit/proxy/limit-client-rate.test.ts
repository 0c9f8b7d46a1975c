import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { BrokerError } from "../../../core/errors.js";
import type { Exchange } from "../../../proxy/exchange.js";
import { createLimitClientRate } from "../../../proxy/stages/limit-client-rate.js";

/** Just what the stage reads: the client's name and cap. */
function exchange(name: string, rpm?: number): Exchange {
  return {
    client: { rule: { name, providers: "*", role: "user", ...(rpm === undefined ? {} : { rpm }) } },
  } as Exchange;
}

function refusal(run: () => void): BrokerError {
  try {
    run();
  } catch (err) {
    if (err instanceof BrokerError) return err;
    throw err;
  }
  throw new Error("expected a refusal");
}

describe("limits.rpm", () => {
  beforeEach(() => {
    vi.useFakeTimers();
    vi.setSystemTime(new Date("2026-01-01T00:00:00Z"));
  });
  afterEach(() => vi.useRealTimers());

  it("lets N requests through in a minute, refuses the next until the oldest is a minute old", () => {
    const limit = createLimitClientRate();
    const x = exchange("cron", 3);
    limit(x);
    vi.advanceTimersByTime(10_000);
    limit(x);
    limit(x);
    const err = refusal(() => limit(x));
    expect(err.code).toBe("client_rate_limited");
    expect(err.status).toBe(429);
    expect(err.headers["retry-after"]).toBe("50");
    vi.advanceTimersByTime(50_000);
    limit(x); // the first request is a minute old now
    expect(refusal(() => limit(x)).headers["retry-after"]).toBe("10");
  });

  it("counts each client apart, skips clients without a cap, and starts over when the cap changes", () => {
    const limit = createLimitClientRate();
    limit(exchange("a", 1));
    expect(refusal(() => limit(exchange("a", 1))).code).toBe("client_rate_limited");
    limit(exchange("b", 1));
    for (let i = 0; i < 1000; i++) limit(exchange("free"));
    limit(exchange("a", 2));
  });
});
