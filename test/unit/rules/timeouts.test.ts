// `timeouts:`, `limits:` and a provider's `timeout` in the rule file (docs/spec.md §3.8).
import { describe, expect, it } from "vitest";
import { DEFAULT_TIMEOUTS } from "../../../rules/compile.js";
import { parseSnippet, snippetProblems } from "../../helpers/rules.js";

const parse = parseSnippet;
const problems = snippetProblems;

describe("connection timeouts and limits", () => {
  it("has defaults: every stage has a timeout, the cap is left to the broker", () => {
    const rules = parse("");
    expect(rules.timeouts).toEqual(DEFAULT_TIMEOUTS);
    expect(rules.timeouts).toEqual({
      handshakeMs: 10_000,
      headersMs: 30_000,
      keepAliveMs: 60_000,
      tunnelIdleMs: 900_000,
      upstreamMs: 1_800_000,
    });
    expect(rules.limits).toEqual({});
  });

  it("reads durations and the cap", () => {
    const rules = parse(
      "timeouts: { handshake: 2s, headers: 500ms, keep_alive: 1m, tunnel_idle: 2m, upstream: 10m }\nlimits: { connections: 100 }\n",
    );
    expect(rules.timeouts).toEqual({
      handshakeMs: 2000,
      headersMs: 500,
      keepAliveMs: 60_000,
      tunnelIdleMs: 120_000,
      upstreamMs: 600_000,
    });
    expect(rules.limits).toEqual({ connections: 100 });
  });

  it("takes a provider's own upstream timeout", () => {
    const rules = parse("providers:\n  openai:\n    timeout: 90s\n");
    expect(rules.providers.find((p) => p.id === "openai")?.timeoutMs).toBe(90_000);
    expect(rules.providers.find((p) => p.id === "anthropic")?.timeoutMs).toBeUndefined();
  });

  it("refuses zero, nonsense, unknown keys and a cap below one, naming the path", () => {
    expect(problems("timeouts: { headers: 0 }\n")).toEqual([
      'timeouts.headers: must be more than zero, as in "5s"',
    ]);
    expect(problems("timeouts: { handshake: soon }\n")[0]).toMatch(/^timeouts\.handshake: is not a duration/);
    expect(problems("timeouts: { keepalive: 5s }\n")[0]).toMatch(
      /^timeouts: unknown key "keepalive" — did you mean "keep_alive"\?/,
    );
    expect(problems("limits: { connections: 0 }\n")).toEqual(["limits.connections: must be at least 1"]);
    expect(problems("limits: { connections: 1.5 }\n")).toEqual([
      "limits.connections: must be a whole number",
    ]);
    expect(problems("providers:\n  openai:\n    timeout: -1\n")[0]).toMatch(/^providers\.openai\.timeout: /);
  });
});
