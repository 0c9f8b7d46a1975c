// Every URL key of the rule file goes through rules/url.ts; each keeps its own messages and
// the order of its checks (a URL with two faults is told the same first fault as before).
import { describe, expect, it } from "vitest";
import { RuleFileError } from "../../../rules/errors.js";
import { parseRules } from "../../../rules/load.js";

function messages(yaml: string): string[] {
  try {
    parseRules(`version: 1\ncatalogue: false\n${yaml}`, "test.yaml", "/etc/kb");
  } catch (err) {
    if (err instanceof RuleFileError) return err.problems.map((p) => `${p.path}: ${p.message}`);
    throw err;
  }
  return [];
}

const oauth = (extra: string) =>
  `providers:\n  p:\n    hosts: [p.example.com]\n    oauth:\n      client_id: app\n      token_endpoint: https://auth.example.com/token\n      device_authorization_endpoint: https://auth.example.com/device\n${extra}`;

describe("the rule file's URL keys", () => {
  it("say what to write for each fault, in each key's order", () => {
    expect(messages(oauth("      issuer: not a url\n"))).toEqual([
      'providers.p.oauth.issuer: is not a URL — write "https://host/path"',
    ]);
    // An endpoint is checked for credentials before its scheme...
    expect(messages(oauth("      issuer: http://u:p@auth.example.com\n"))).toEqual([
      "providers.p.oauth.issuer: must not carry credentials",
    ]);
    expect(messages(oauth("      issuer: http://auth.example.com\n"))).toEqual([
      "providers.p.oauth.issuer: must be an https:// URL (http:// is accepted only for 127.0.0.1, ::1 and localhost)",
    ]);
    // ...an upstream and an MCP server for their scheme first.
    expect(messages("providers:\n  u: { upstream: http://u:p@api.example.com }\n")).toEqual([
      'providers.u.upstream: must be an https:// origin such as "https://api.example.com"',
    ]);
    expect(messages("providers:\n  m: { mcp: http://u:p@mcp.example.com/mcp }\n")).toEqual([
      'providers.m.mcp: must be an https:// URL, such as "https://mcp.example.com/mcp" (http:// only for 127.0.0.1, ::1 and localhost)',
    ]);
    expect(messages("providers:\n  m: { mcp: https://u:p@mcp.example.com/mcp#x }\n")).toEqual([
      "providers.m.mcp: must not carry credentials",
    ]);
    expect(messages("providers:\n  m: { mcp: https://mcp.example.com/mcp#x }\n")).toEqual([
      "providers.m.mcp: must not have a #fragment",
    ]);
    expect(messages(oauth("      redirect_uri: http://[::1]:9000/cb\n"))).toEqual([
      "providers.p.oauth.redirect_uri: must be http://127.0.0.1:<port>/..., http://localhost:<port>/... or an https:// URL",
    ]);
    expect(messages("state: redis://:pw@127.0.0.1:6379/0?x=1\n")).toEqual([
      "state: must not carry a password — write state: { url, password: <credential reference> }",
    ]);
    expect(messages("state: redis://127.0.0.1:6379/0#x\n")).toEqual(["state: takes no query or fragment"]);
    expect(messages("state: redis://127.0.0.1:6379/abc\n")).toEqual([
      'state: the path is a database number, as in "/0"',
    ]);
    expect(messages("sources:\n  infisical: { project_id: p, environment: e, site_url: ftp://x }\n")).toEqual(
      [
        "sources.infisical.site_url: must be an https:// URL (http:// is accepted only for 127.0.0.1, ::1 and localhost)",
      ],
    );
  });
});
