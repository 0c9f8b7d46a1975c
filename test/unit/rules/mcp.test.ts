// `mcp: <url>` in the rule file (docs/spec.md §15): the server's host bound (its port when not 443), its
// origin mounted at /p/<id>, OAuth with a code and PKCE, and an `oauth:` block that overrides
// what discovery would find. Every mistake names its path.
import { describe, expect, it } from "vitest";
import { RuleFileError } from "../../../rules/errors.js";
import { parseRules } from "../../../rules/load.js";
import type { McpRule } from "../../../rules/types.js";

function provider(text: string, id: string): McpRule {
  const rules = parseRules(`version: 1\ncatalogue: false\nproviders:\n${text}`, "test.yaml", "/etc/kb");
  const found = rules.providers.find((p) => p.id === id);
  if (found?.kind !== "mcp") throw new Error(`no MCP provider ${id}`);
  return found;
}

function problems(text: string): { path: string; message: string }[] {
  try {
    parseRules(`version: 1\ncatalogue: false\nproviders:\n${text}`, "test.yaml", "/etc/kb");
  } catch (err) {
    if (err instanceof RuleFileError) return err.problems.map((p) => ({ path: p.path, message: p.message }));
    throw err;
  }
  throw new Error("expected the rule file to be rejected");
}

describe("mcp: <url>", () => {
  it("binds the host, mounts the origin and logs in with a code and PKCE", () => {
    const p = provider("  notes:\n    mcp: https://mcp.example.com/mcp\n", "notes");
    expect(p.hosts.map((h) => `${h.host}:${h.port}`)).toEqual(["mcp.example.com:443"]);
    expect(p.upstream).toBe("https://mcp.example.com");
    expect(p.mount).toBe("/p/notes");
    expect(p.mcp).toEqual({ url: "https://mcp.example.com/mcp" });
    expect(p.credentials).toEqual([]);
    expect(p.inject.headers).toEqual(["authorization"]);
    expect(p.oauth).toMatchObject({ grant: "pkce", clientId: "", scopes: [], clientAuth: "none" });
    expect(p.placeholder.env).toEqual(["NOTES_ACCESS_TOKEN"]);
  });

  it("binds the port when it is not 443, and keeps a mount given", () => {
    const p = provider("  notes:\n    mcp: https://mcp.example.com:8443/v1/mcp\n    mount: /p/n\n", "notes");
    expect(p.hosts.map((h) => `${h.host}:${h.port}`)).toEqual(["mcp.example.com:8443"]);
    expect(p.upstream).toBe("https://mcp.example.com:8443");
    expect(p.mount).toBe("/p/n");
  });

  it("accepts plain http for a server on loopback only, served at the mount", () => {
    const p = provider("  local:\n    mcp: http://127.0.0.1:9000/mcp\n", "local");
    expect(p.upstream).toBe("http://127.0.0.1:9000");
    expect(p.hosts.map((h) => `${h.host}:${h.port}`)).toEqual(["127.0.0.1:9000"]);
  });

  it("takes a pre-registered client, scopes and a client metadata document from oauth:", () => {
    const p = provider(
      [
        "  notes:",
        "    mcp: https://mcp.example.com/mcp",
        "    oauth:",
        "      client_id: pre-registered",
        "      scopes: [notes.read]",
        "      client_metadata_url: https://me.example.org/keybroker.json",
        "      token_timeout: 3s",
      ].join("\n"),
      "notes",
    );
    expect(p.oauth).toMatchObject({
      grant: "pkce",
      clientId: "pre-registered",
      scopes: ["notes.read"],
      tokenTimeoutMs: 3000,
    });
    expect(p.mcp.clientMetadataUrl).toBe("https://me.example.org/keybroker.json");
  });

  it("names the path of every mistake", () => {
    expect(
      problems(
        [
          "  notes:",
          "    mcp: http://mcp.example.com/mcp",
          "  other:",
          "    mcp: https://mcp.example.com/mcp",
          "    hosts: [mcp.example.com]",
          "    credentials: [K]",
          "    oauth: { grant: device, client_secret: env:S }",
        ].join("\n"),
      ),
    ).toEqual(
      expect.arrayContaining([
        { path: "providers.notes.mcp", message: expect.stringContaining("must be an https:// URL") },
        { path: "providers.other.hosts", message: expect.stringContaining("remove hosts") },
        { path: "providers.other.credentials", message: expect.stringContaining("remove credentials") },
        { path: "providers.other.oauth.grant", message: expect.stringContaining("PKCE") },
        { path: "providers.other.oauth.client_secret", message: expect.stringContaining("add client_id") },
      ]),
    );
    // client_metadata_url is for MCP servers only; a plain oauth provider still needs client_id.
    expect(
      problems(
        "  p:\n    hosts: [p.example]\n    oauth: { issuer: https://a.example, client_metadata_url: https://m.example/c.json }\n",
      ),
    ).toEqual([
      { path: "providers.p.oauth.client_id", message: expect.stringContaining("required key is missing") },
      { path: "providers.p.oauth.client_metadata_url", message: expect.stringContaining("MCP server") },
    ]);
  });

  it("refuses two MCP servers on one host", () => {
    expect(
      problems("  a:\n    mcp: https://mcp.example.com/a\n  b:\n    mcp: https://mcp.example.com/b\n"),
    ).toEqual([{ path: "providers.b.mcp", message: expect.stringContaining("already bound to") }]);
  });
});
