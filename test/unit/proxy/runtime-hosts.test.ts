// The runtime's host map (decision 123): a host yields every intercepted provider that lists
// it; an exact host wins over a wildcard, and only an identical wildcard is shared.
import { tmpdir } from "node:os";
import { describe, expect, it } from "vitest";
import { Runtime } from "../../../proxy/runtime.js";
import { parseRules } from "../../../rules/load.js";
import { createSecretResolver } from "../../../secrets/sources.js";

/** A runtime for a rule file's lines after `version` and `catalogue`. */
async function runtime(lines: readonly string[], env: Record<string, string> = {}): Promise<Runtime> {
  const rules = parseRules(`version: 1\ncatalogue: false\n${lines.join("\n")}\n`, "test", tmpdir());
  const resolver = createSecretResolver(rules, { env, home: tmpdir(), cwd: tmpdir(), warn: () => {} });
  return Runtime.build(rules, resolver, Buffer.alloc(32, 1));
}

const ids = (rt: Runtime, host: string, port = 443) => rt.providersForHost(host, port)?.map((p) => p.rule.id);

describe("providers by host", () => {
  it("gives every provider of a shared host, in rule order, and one for a host of its own", async () => {
    const rt = await runtime([
      "providers:",
      "  key: { hosts: [api.example.com, only.example.com], credentials: [K] }",
      "  sub: { hosts: [api.example.com], credentials: [S] }",
      "  wild-a: { hosts: ['*.w.example.com'], credentials: [K] }",
      "  wild-b: { hosts: ['*.w.example.com'], credentials: [S] }",
      "  narrow: { hosts: ['x.w.example.com'], credentials: [K] }",
    ]);
    expect(ids(rt, "api.example.com")).toEqual(["key", "sub"]);
    expect(ids(rt, "only.example.com")).toEqual(["key"]);
    expect(ids(rt, "y.w.example.com")).toEqual(["wild-a", "wild-b"]);
    expect(ids(rt, "x.w.example.com")).toEqual(["narrow"]);
    expect(ids(rt, "api.example.com", 8443)).toBeUndefined();
    expect(rt.providerForHost("api.example.com", 443)?.rule.id).toBe("key");
  });
});

describe("host lookups one after another", () => {
  // The runtime remembers its last lookup (decision 190): each answer must be the host's own,
  // whatever was asked before it.
  it("answer for the host and port asked, providers and sign-in endpoints alike", async () => {
    const rt = await runtime([
      "providers:",
      "  a: { hosts: [a.example.com], credentials: [K] }",
      "  b: { hosts: ['b.example.com:8443'], credentials: [S] }",
      "  login:",
      "    hosts: [login.example.com]",
      "    oauth:",
      "      device_authorization_endpoint: https://auth.example.com/device",
      "      token_endpoint: https://auth.example.com/token",
      "      client_id: app",
    ]);
    const asked: [string, number][] = [
      ["a.example.com", 443],
      ["b.example.com", 8443],
      ["a.example.com", 443],
      ["a.example.com", 8443],
      ["b.example.com", 443],
      ["auth.example.com", 443],
      ["login.example.com", 443],
      ["auth.example.com", 443],
      ["a.example.com", 443],
    ];
    const seen = asked.map(([host, port]) => [
      ids(rt, host, port)?.join(",") ?? "-",
      rt.oauthEndpoint(host, port, "/token")?.role ?? "-",
      rt.hasOAuthEndpoints(host, port),
      rt.intercepts(host, port),
    ]);
    expect(seen).toEqual([
      ["a", "-", false, true],
      ["b", "-", false, true],
      ["a", "-", false, true],
      ["-", "-", false, false],
      ["-", "-", false, false],
      ["-", "token", true, true],
      ["login", "-", false, true],
      ["-", "token", true, true],
      ["a", "-", false, true],
    ]);
  });
});
