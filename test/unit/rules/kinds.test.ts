import { describe, expect, it } from "vitest";
import { kindOf } from "../../../rules/kinds/index.js";
import { parseRules } from "../../../rules/load.js";

const RULES = `version: 1
catalogue: false
providers:
  keys: { hosts: [keys.example.com] }
  login:
    hosts: [login.example.com]
    oauth: { device_authorization_endpoint: "https://auth.example.com/device", token_endpoint: "https://auth.example.com/token", client_id: app }
  machine:
    hosts: [machine.example.com]
    oauth: { grant: client_credentials, token_endpoint: "https://auth.example.com/token", client_id: app, client_secret: env:SECRET }
  notes: { mcp: "https://mcp.example.com/mcp" }
  vertex:
    upstream: https://vertex.example.com
    auth: { google_service_account: file:/keys/sa.json }
  bedrock:
    upstream: https://bedrock.example.com
    auth: { aws_sigv4: { region: us-east-1, service: bedrock, access_key_id: A, secret_access_key: S, session_token: T } }
`;

describe("provider kinds", () => {
  const rules = parseRules(RULES, "test.yaml", "/etc/kb");
  const rule = (id: string) => rules.providers.find((p) => p.id === id)!;

  it("are chosen once, when the rules compile", () => {
    expect(Object.fromEntries(rules.providers.map((p) => [p.id, p.kind]))).toEqual({
      keys: "key_pool",
      login: "oauth_login",
      machine: "client_credentials",
      notes: "mcp",
      vertex: "google_service_account",
      bedrock: "aws_sigv4",
    });
  });

  it("say where the credential comes from", () => {
    expect(kindOf(rule("keys")).loadRefs(rule("keys"))).toEqual(["KEYS_API_KEY"]);
    expect(kindOf(rule("vertex")).loadRefs(rule("vertex"))).toEqual(["file:/keys/sa.json"]);
    expect(kindOf(rule("bedrock")).signingRefs(rule("bedrock"))).toEqual(["A", "S", "T"]);
    for (const id of ["login", "machine", "notes"]) expect(kindOf(rule(id)).poolOfLogins).toBe(true);
    expect(kindOf(rule("machine")).personLogins).toBe(false);
    expect(kindOf(rule("notes")).boundLogins).toBe(true);
    expect(rule("login").placeholder.env).toEqual(["LOGIN_ACCESS_TOKEN"]);
    expect(rule("vertex").placeholder.env).toEqual(["VERTEX_API_KEY"]);
  });

  it("decide when a provider can serve", () => {
    expect(kindOf(rule("keys")).active(1, 3)).toBe(true);
    expect(kindOf(rule("bedrock")).active(2, 3)).toBe(false);
    expect(kindOf(rule("login")).active(0, 0)).toBe(true);
  });
});
