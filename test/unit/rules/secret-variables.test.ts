// The variables a rule set reads secrets from (rules/secret-variables.ts): `run` removes them from
// its command's environment and the broker blanks them in its own (decision 119).
import { describe, expect, it } from "vitest";
import { secretHoldingVariables } from "../../../cli/hide-environ.js";
import { secretRefs, secretVariableNames } from "../../../rules/secret-variables.js";
import { parseSnippet } from "../../helpers/rules.js";

const RULES = parseSnippet(
  [
    "catalogue: false",
    "state: { url: redis://127.0.0.1:6379, password: env:REDIS_PASSWORD }",
    "providers:",
    "  partner:",
    "    hosts: [api.partner.example]",
    "    oauth:",
    "      grant: pkce",
    "      issuer: https://idp.partner.example",
    "      client_id: svc-1",
    "      client_secret: env:PARTNER_SECRET",
    "  internal:",
    "    hosts: [api.internal.example]",
    "    inject: { header: authorization }",
    '    credentials: [INTERNAL_KEY, "dotenv:INTERNAL_KEY_2", "file:/run/internal.key"]',
    "clients:",
    "  ci: { providers: '*', token: env:CI_TOKEN }",
  ].join("\n"),
);

describe("secret variables", () => {
  it("include OAuth client secrets, the fleet's Redis password and placeholder variables, not other sources' keys", () => {
    expect([...secretVariableNames(RULES)].sort()).toEqual([
      "CI_TOKEN",
      "INTERNAL_API_KEY", // placeholder variables may hold a real key (decision 122)
      "INTERNAL_KEY",
      "PARTNER_ACCESS_TOKEN",
      "PARTNER_SECRET",
      "REDIS_PASSWORD",
    ]);
    expect(secretRefs(RULES)).toEqual(
      expect.arrayContaining(["dotenv:INTERNAL_KEY_2", "file:/run/internal.key"]),
    );
  });

  it("a broker blanks the catalogue's variables too, even with the catalogue off", () => {
    const names = secretHoldingVariables(RULES, []);
    expect(names).toContain("OPENAI_API_KEY");
    expect(names).toContain("GOOGLE_API_KEY");
    expect(names).toContain("REDIS_PASSWORD");
  });
});
