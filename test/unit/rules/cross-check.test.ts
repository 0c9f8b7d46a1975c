// The checks that need the whole rule file read it as the schema parsed it, entry by entry
// (decision 150): an entry the schema refuses is reported by the schema alone, its id still
// counts as known, and every other entry is still cross-checked in the same pass.
import { describe, expect, it } from "vitest";
import { RuleFileError } from "../../../rules/errors.js";
import { parseRules } from "../../../rules/load.js";

function rendered(lines: readonly string[]): string[] {
  try {
    parseRules(["version: 1", "catalogue: false", ...lines].join("\n"), "test.yaml", "/etc/kb");
  } catch (err) {
    if (err instanceof RuleFileError) return err.problems.map((p) => `${p.path}: ${p.message}`);
    throw err;
  }
  throw new Error("expected the rule file to be rejected");
}

describe("cross-checks on the parsed file", () => {
  it("leave an entry the schema refuses to the schema, and still check the others", () => {
    expect(
      rendered([
        "providers:",
        "  first:",
        "    hosts: [api.example.com]",
        "  second:",
        "    hosts: [api.example.com]",
        "    placeholder: { env: FIRST_API_KEY }",
        "    pool: { strategy: sometimes }",
        "  third:",
        "    hosts: [other.example.com]",
        "    placeholder: { env: FIRST_API_KEY }",
      ]),
    ).toEqual([
      'providers.second.pool.strategy: "sometimes" is not one of "fill_first", "round_robin", "least_used"',
      "providers.third.placeholder.env: the placeholder variable FIRST_API_KEY is already set for provider first — give this provider another (placeholder.env)",
    ]);
  });

  it("count a refused entry's id as known: a fallback or client naming it is not told it is missing", () => {
    expect(
      rendered([
        "providers:",
        "  main: { upstream: https://main.example.com }",
        "  spare: { upstream: https://spare.example.com, timeout: never }",
        "fallbacks: { main: [spare, nowhere] }",
        "clients: { ci: { providers: [spare] } }",
      ]),
    ).toEqual([
      'providers.spare.timeout: is not a duration — write "500ms", "60s", "5m", "1h", or a number of seconds',
      'fallbacks.main[1]: there is no provider "nowhere" — known providers: main, spare',
    ]);
  });

  it("check an MCP server's host against the other providers by its kind", () => {
    expect(
      rendered([
        "providers:",
        "  api: { hosts: [mcp.example.com] }",
        "  notes: { mcp: https://mcp.example.com/mcp }",
      ]),
    ).toEqual([
      'providers.notes.mcp: "mcp.example.com" is already bound to provider api; an MCP server\'s host belongs to it alone',
    ]);
  });
});
