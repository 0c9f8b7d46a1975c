import { describe, expect, it } from "vitest";
import { classify, parseGoDuration, resetTime } from "../../../secrets/quota.js";

const NOW = Date.parse("2026-11-22T12:00:00Z");

describe("parseGoDuration", () => {
  it.each([
    ["1s", 1000],
    ["6m0s", 360_000],
    ["1h2m3.5s", 3_723_500],
    ["20ms", 20],
    ["30", 30_000],
  ])("%s → %d ms", (text, ms) => {
    expect(parseGoDuration(text)).toBe(ms);
  });

  it("rejects text that is not a duration", () => {
    expect(parseGoDuration("soon")).toBeUndefined();
    expect(parseGoDuration("5x")).toBeUndefined();
  });
});

describe("resetTime", () => {
  it("prefers retry-after, in seconds or as a date", () => {
    expect(resetTime({ "retry-after": "120", "x-ratelimit-reset-requests": "1h" }, undefined, NOW)).toBe(
      NOW + 120_000,
    );
    expect(resetTime({ "retry-after": "Sun, 22 Nov 2026 12:05:00 GMT" }, undefined, NOW)).toBe(NOW + 300_000);
    expect(resetTime({ "retry-after-ms": "1500" }, undefined, NOW)).toBe(NOW + 1500);
  });

  it("takes the latest of OpenAI's and Anthropic's reset headers", () => {
    const headers = {
      "x-ratelimit-reset-requests": "2s",
      "x-ratelimit-reset-tokens": "6m0s",
      "anthropic-ratelimit-tokens-reset": "2026-11-22T12:10:00Z",
    };
    expect(resetTime(headers, undefined, NOW)).toBe(NOW + 600_000);
  });

  it("reads a usage-limit body's resets_in_seconds / resets_at", () => {
    expect(resetTime({}, { error: { type: "usage_limit_reached", resets_in_seconds: 90 } }, NOW)).toBe(
      NOW + 90_000,
    );
    expect(resetTime({}, { error: { resets_at: NOW / 1000 + 60 } }, NOW)).toBe(NOW + 60_000);
  });

  it("ignores times already past and gives undefined without any", () => {
    expect(
      resetTime({ "anthropic-ratelimit-requests-reset": "2026-11-22T11:00:00Z" }, undefined, NOW),
    ).toBeUndefined();
    expect(resetTime({}, undefined, NOW)).toBeUndefined();
  });
});

describe("classify", () => {
  it("marks a 429 as out of quota, whatever the body", () => {
    expect(classify(429, { "retry-after": "10" }, "not json", NOW)).toEqual({
      kind: "usage_limit",
      until: NOW + 10_000,
      reason: "HTTP 429",
    });
  });

  it("marks a 400/402/403 only when its body names a usage-limit error", () => {
    const quota = JSON.stringify({
      error: { type: "insufficient_quota", message: "You exceeded your current quota" },
    });
    expect(classify(400, {}, quota, NOW)?.kind).toBe("usage_limit");
    expect(
      classify(403, {}, JSON.stringify({ message: "Resource not accessible by integration" }), NOW),
    ).toBeUndefined();
  });

  it("marks a 401 invalid and leaves other answers alone", () => {
    expect(classify(401, {}, '{"error":{"type":"authentication_error"}}', NOW)).toMatchObject({
      kind: "invalid",
    });
    expect(classify(200, {}, "{}", NOW)).toBeUndefined();
    expect(classify(500, {}, '{"error":{"type":"rate_limit_error"}}', NOW)).toBeUndefined();
  });
});
