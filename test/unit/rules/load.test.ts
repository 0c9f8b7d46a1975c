import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type Problem, RuleFileError } from "../../../rules/errors.js";
import { findRuleFile, loadRules, parseRules } from "../../../rules/load.js";
import type { ProviderRule, Rules } from "../../../rules/types.js";

const BASE = "/etc/kb";

/**
 * The text with the required `version: 1` added at its end (so the line numbers the tests
 * expect stay those of the text), unless it says a version itself.
 */
function versioned(text: string): string {
  if (/^version:/m.test(text)) return text;
  return `${text}${text === "" || text.endsWith("\n") ? "" : "\n"}version: 1\n`;
}

function parse(text: string): Rules {
  return parseRules(versioned(text), "test.yaml", BASE);
}

function failure(text: string, asIs = false): RuleFileError {
  try {
    if (asIs) parseRules(text, "test.yaml", BASE);
    else parse(text);
  } catch (err) {
    if (err instanceof RuleFileError) return err;
    throw err;
  }
  throw new Error("expected the rule file to be rejected");
}

function problems(text: string): Problem[] {
  return [...failure(text).problems];
}

/** The provider `id`; given a kind, it must be of that kind, and its fields are that kind's. */
function provider<K extends ProviderRule["kind"] = ProviderRule["kind"]>(
  rules: Rules,
  id: string,
  kind?: K,
): Extract<ProviderRule, { kind: K }> {
  const found = rules.providers.find((p) => p.id === id);
  if (!found) throw new Error(`no provider ${id}`);
  if (kind !== undefined) expect(found.kind).toBe(kind);
  return found as Extract<ProviderRule, { kind: K }>;
}

describe("rule file errors", () => {
  it.each([
    ["empty", ""],
    ["only comments", "# keybroker rules\n# (being edited)\n"],
    ["an empty document", "---\n"],
  ])("rejects a file that is %s (an editor's truncation), saying what it must hold", (_what, text) => {
    const err = failure(text, true);
    expect(err.problems).toEqual([
      {
        path: "",
        message: expect.stringContaining('the rule file is empty: it must say at least "version: 1"'),
      },
    ]);
  });

  it("rejects a file without version: 1, or with another version", () => {
    expect(failure("providers:\n  openai: {}\n", true).problems).toEqual([
      {
        path: "version",
        message:
          'required key is missing: a rule file must say "version: 1" (on its first line, by convention)',
        line: 1,
        column: 1,
      },
    ]);
    expect(failure("version: 2\n", true).problems).toEqual([
      { path: "version", message: "expected 1, got 2", line: 1, column: 10 },
    ]);
  });

  it("suggests the closest key for an unknown key", () => {
    const err = failure("providers:\n  openai:\n    inject: { hedaer: authorization }\n");
    expect(err.problems).toEqual([
      {
        path: "providers.openai.inject",
        message: 'unknown key "hedaer" — did you mean "header"?',
        line: 3,
        column: 15,
      },
    ]);
    expect(err.message).toContain('providers.openai.inject: unknown key "hedaer" — did you mean "header"?');
  });

  it("lists the allowed keys when nothing is close", () => {
    expect(problems("providers:\n  openai:\n    pool: { zzzzzz: 1 }\n")[0]?.message).toBe(
      'unknown key "zzzzzz" — allowed keys: strategy, affinity, retry_body_limit, cooldown',
    );
  });

  it("reports unknown keys at the top level", () => {
    expect(problems("catalog: false\n")).toMatchObject([
      { path: "(top level)", message: 'unknown key "catalog" — did you mean "catalogue"?' },
    ]);
  });

  it("reports every problem at once, each with its path, one per line of the message", () => {
    const err = failure(
      [
        "version: 2",
        "intercept: everything",
        "providers:",
        "  openai:",
        "    inject: { hedaer: authorization }",
        "    credentials: 5",
        "  x:",
        '    hosts: [api.example.com, "api.openai.*"]',
        "    pool: { strategy: round-robin }",
        "fallbacks: { openai: [nope] }",
        "sources: { order: [dotenv, env], infisical: { environment: prod } }",
      ].join("\n"),
    );
    const rendered = err.problems.map((p) => `${p.path}: ${p.message}`);
    expect(rendered).toEqual([
      "version: expected 1, got 2",
      'intercept: "everything" is not one of "providers", "all"',
      'providers.openai.inject: unknown key "hedaer" — did you mean "header"?',
      "providers.openai.credentials: expected a list of credential references, got a number",
      'providers.x.hosts[1]: "api.openai.*" is not a valid host pattern (a wildcard must be the whole first label, as in "*.example.com") — use an exact host or "*.example.com"',
      'providers.x.pool.strategy: "round-robin" is not one of "fill_first", "round_robin", "least_used" — did you mean "round_robin"?',
      expect.stringMatching(/^fallbacks\.openai\[0\]: there is no provider "nope"/),
      "sources.infisical.project_id: required key is missing (expected a string)",
    ]);
    const lines = err.message.split("\n");
    expect(lines[0]).toBe("invalid rule file test.yaml (8 problems):");
    expect(lines).toHaveLength(9);
    expect(lines[1]).toBe("  version: expected 1, got 2 (line 1)");
  });

  it("phrases type errors for humans", () => {
    const found = problems(
      [
        "listen: true",
        "upstream_ca: 3",
        "providers:",
        "  x:",
        "    hosts: [1]",
        "    headers: { remove: 5 }",
        "    inject: { header: [x-a, 7] }",
        "clients: { a: { providers: openai } }",
      ].join("\n"),
    );
    expect(found.map((p) => `${p.path}: ${p.message}`)).toEqual([
      'listen: expected "host:port" or a port number, got true',
      "upstream_ca: expected a file path or a list of file paths, got a number",
      "providers.x.hosts[0]: expected a host pattern, got a number",
      "providers.x.headers.remove: expected a list of header names, got a number",
      "providers.x.inject.header[1]: expected a header name, got a number",
      'clients.a.providers: expected "*" or a list of provider ids, got a string',
    ]);
  });

  it("reports YAML syntax errors with line and column", () => {
    const err = failure("version: 1\nproviders:\n  openai:\n    hosts: [api.openai.com\n    inject: {}\n");
    expect(err.problems).toHaveLength(1);
    expect(err.problems[0]).toMatchObject({ path: "", line: 5, column: 5 });
    expect(err.problems[0]?.message).toMatch(/^YAML syntax error: /);
    expect(err.message).toMatch(/\n {2}line 5, column 5: YAML syntax error: /);
  });

  it("rejects duplicate keys", () => {
    expect(problems("intercept: all\nintercept: providers\n")[0]).toMatchObject({
      line: 2,
      message: expect.stringContaining("unique"),
    });
  });

  it("rejects a file that is not a map", () => {
    expect([...failure("- a\n- b\n", true).problems]).toMatchObject([
      { path: "(top level)", message: "expected a map (key: value), got a list" },
    ]);
  });

  it("never repeats a credential value in a message", () => {
    const secret = "sk-proj-Abcdefghijklmnopqrstuvwxyz0123456789";
    const err = failure(
      `providers:\n  openai:\n    credentials: ["${secret}"]\n    headers: { set: { x-a: 5 } }\n`,
    );
    expect(err.message).not.toContain(secret);
    expect(err.problems[0]).toMatchObject({ path: "providers.openai.credentials[0]" });
    expect(err.problems[0]?.message).toContain(
      "write NAME, env:NAME, dotenv:NAME, file:PATH, infisical:/path/NAME or cmd:<command line>",
    );
    expect(err.problems[0]?.message).toContain("never put a secret itself in the rule file");
  });

  it.each([
    ["vault:x", 'unknown credential source "vault:"'],
    ["enf:X", 'did you mean "env:"?'],
    ["env:", "env: needs a variable name"],
    ["dotenv:1X", "dotenv: needs a variable name"],
    ["file:", "file: needs a path"],
    ["infisical:NAME", "infisical: needs an absolute secret path"],
    ["cmd:  ", "cmd: needs a command line"],
    ["has space", "not a credential reference"],
  ])("rejects the credential reference %j", (ref, message) => {
    const [first] = problems(`providers:\n  openai:\n    credentials: [${JSON.stringify(ref)}]\n`);
    expect(first?.path).toBe("providers.openai.credentials[0]");
    expect(first?.message).toContain(message);
  });

  it("accepts every credential reference form", () => {
    const refs = [
      "NAME_1",
      "env:A",
      "dotenv:B",
      "file:/run/x",
      "infisical:/llm/C",
      "infisical:/D",
      "cmd:pass show x",
    ];
    const rules = parse(`providers:\n  openai:\n    credentials: ${JSON.stringify(refs)}\n`);
    expect(provider(rules, "openai").credentials).toEqual(refs);
  });
});

describe("cross-checks", () => {
  it("lets providers share a host, told apart by their placeholders", () => {
    const rules = parse(
      "providers:\n  a: { hosts: [api.example.com] }\n  b: { hosts: [API.Example.com.] }\n  c: { hosts: [api.openai.com] }\n",
    );
    expect(provider(rules, "b").hosts[0]?.host).toBe("api.example.com");
    expect(provider(rules, "c").hosts[0]?.host).toBe("api.openai.com");
  });

  it("refuses a shared host when the providers cannot be told apart, or one is an MCP server", () => {
    const found = problems(
      [
        "providers:",
        "  a: { hosts: [api.example.com], placeholder: { value: same-fixed-value } }",
        "  b: { hosts: [api.example.com], placeholder: { value: same-fixed-value } }",
        "  notes: { mcp: https://mcp.example.com/mcp }",
        "  d: { hosts: [mcp.example.com] }",
        "  e: { hosts: [api.example.com, api.example.com] }",
      ].join("\n"),
    );
    expect(found.map((p) => p.path)).toEqual([
      "providers.b.placeholder.value",
      "providers.d.hosts[0]",
      "providers.e.hosts[1]",
    ]);
    expect(found[0]?.message).toContain("this fixed placeholder is already provider a's");
    expect(found[1]?.message).toBe(
      '"mcp.example.com" is already bound to provider notes; an MCP server\'s host belongs to it alone',
    );
    expect(found[2]?.message).toContain("is listed twice");
  });

  it("allows the same host on another port", () => {
    const rules = parse(
      "providers:\n  a: { hosts: [api.example.com] }\n  b: { hosts: [api.example.com:8443] }\n",
    );
    expect(provider(rules, "b").hosts[0]?.port).toBe(8443);
  });

  it("needs hosts or an upstream", () => {
    expect(problems("providers:\n  a: { inject: { header: x-key } }\n")).toMatchObject([
      { path: "providers.a", message: expect.stringContaining("a provider needs hosts") },
    ]);
    expect(problems("providers:\n  a: { mount: /p/a }\n")).toMatchObject([
      { path: "providers.a.mount", message: expect.stringContaining("needs an upstream") },
    ]);
  });

  it("checks mounts and upstreams", () => {
    const found = problems(
      [
        "providers:",
        "  a: { mount: /a, upstream: https://a.example.com }",
        "  b: { mount: /p/openai, upstream: https://b.example.com }",
        "  c: { upstream: http://c.example.com }",
        "  d: { mount: /p/d, upstream: https://d.example.com/v1?x=1 }",
        "  e: { mount: /p/shared, upstream: https://e.example.com }",
        "  f: { mount: /p/shared/, upstream: https://f.example.com }",
      ].join("\n"),
    );
    expect(found.map((p) => `${p.path}: ${p.message}`)).toEqual([
      'providers.a.mount: must be "/p/<name>" (one path segment after /p/)',
      expect.stringMatching(/^providers\.b\.mount: mount \/p\/openai is already used by provider openai/),
      'providers.c.upstream: must be an https:// origin such as "https://api.example.com"',
      'providers.d.upstream: must be an origin with an optional base path, such as "https://d.example.com/v1" — no query or fragment',
      "providers.f.mount: mount /p/shared is already used by provider e — choose another mount",
    ]);
  });

  it("checks that fallbacks and client providers exist", () => {
    const found = problems(
      "fallbacks: { openai: [opnerouter], nope: [openai] }\nclients: { cron: { token: T, providers: [openai, anthropc] } }\n",
    );
    expect(found.map((p) => `${p.path}: ${p.message}`)).toEqual([
      'fallbacks.openai[0]: there is no provider "opnerouter" — did you mean "openrouter"?',
      expect.stringMatching(/^fallbacks\.nope: there is no provider "nope" — known providers: openai, /),
      'clients.cron.providers[1]: there is no provider "anthropc" — did you mean "anthropic"?',
    ]);
  });

  it("checks the placeholder variable is not shared", () => {
    expect(
      problems("providers:\n  my-openai: { hosts: [x.example.com], placeholder: { env: OPENAI_API_KEY } }\n"),
    ).toMatchObject([
      {
        path: "providers.my-openai.placeholder.env",
        message: expect.stringContaining("OPENAI_API_KEY is already set"),
      },
    ]);
  });

  it("checks every name of a placeholder list, which cannot be empty", () => {
    expect(
      problems(
        "providers:\n  my-codex: { hosts: [x.example.com], placeholder: { env: [MY_KEY, CODEX_API_KEY] } }\n",
      ),
    ).toMatchObject([
      {
        path: "providers.my-codex.placeholder.env",
        message: expect.stringContaining("CODEX_API_KEY is already set for provider openai"),
      },
    ]);
    expect(
      problems("providers:\n  my: { hosts: [x.example.com], placeholder: { env: [] } }\n"),
    ).toMatchObject([
      { path: "providers.my.placeholder.env", message: expect.stringContaining("at least one") },
    ]);
  });

  it("reads the key from the first name of a placeholder list, the others as its aliases", () => {
    const rules = parse(
      "providers:\n  my: { hosts: [x.example.com], placeholder: { env: [MY_KEY, MY_OTHER_KEY] } }\n",
    );
    expect(provider(rules, "my").credentials).toEqual(["MY_KEY"]);
    expect(provider(rules, "my").credentialAliases).toEqual(["MY_OTHER_KEY"]);
    const listed = parse(
      "providers:\n  my: { hosts: [x.example.com], credentials: [K1], placeholder: { env: [MY_KEY, MY_OTHER_KEY] } }\n",
    );
    expect(provider(listed, "my").credentialAliases).toEqual([]);
  });

  it("checks sources", () => {
    expect(problems("sources: { order: [infisical, env, env] }\n").map((p) => p.path)).toEqual([
      "sources.order",
      "sources.order[2]",
    ]);
  });

  it("rejects a non-loopback listen address without client tokens", () => {
    expect(failure("listen: 0.0.0.0:8899\n").message).toContain(
      "listen: binding 0.0.0.0:8899 requires client tokens (docs/spec.md §3.5) — add clients.<name>.token",
    );
    expect(
      problems("listen: 192.168.1.5:8899\nclients: { a: { token: TA }, b: { providers: '*' } }\n"),
    ).toEqual([
      {
        path: "listen",
        message: "binding 192.168.1.5:8899 requires client tokens (docs/spec.md §3.5) — add clients.b.token",
        line: 1,
        column: 9,
      },
    ]);
  });

  it("accepts a non-loopback listen address when every client has a token", () => {
    const rules = parse(
      "listen: 0.0.0.0:8899\nclients: { a: { token: env:TA }, b: { token: TB, role: owner } }\n",
    );
    expect(rules.listen).toEqual({ host: "0.0.0.0", port: 8899 });
    expect(rules.clients.map((c) => c.token)).toEqual(["env:TA", "TB"]);
  });

  it("accepts loopback listen addresses without tokens", () => {
    expect(parse("listen: 127.0.0.2:9000\n").listen).toEqual({ host: "127.0.0.2", port: 9000 });
    expect(parse('listen: "[::1]:9000"\n').listen).toEqual({ host: "::1", port: 9000 });
    expect(parse("listen: localhost:0\n").listen).toEqual({ host: "localhost", port: 0 });
    expect(parse("listen: 9001\n").listen).toEqual({ host: "127.0.0.1", port: 9001 });
  });
});

describe("compiling", () => {
  it("serves the embedded catalogue with defaults when the file says only its version", () => {
    const rules = parse("version: 1\n");
    expect(rules.origin).toBe("test.yaml");
    expect(rules.listen).toEqual({ host: "127.0.0.1", port: 8899 });
    expect(rules.intercept).toBe("providers");
    expect(rules.sources).toEqual({ order: ["dotenv", "env"] });
    expect(rules.clients).toEqual([{ name: "default", providers: "*", role: "owner" }]);
    expect(rules.providers.every((p) => p.fromCatalogue)).toBe(true);
    expect(provider(rules, "openai").credentials).toEqual(["OPENAI_API_KEY"]);
  });

  it("merges a file's provider over the catalogue entry of the same id", () => {
    const rules = parse(
      "providers:\n  openai:\n    credentials: [OPENAI_API_KEY, OPENAI_API_KEY_2]\n    pool: { strategy: round_robin }\n  gemini:\n    inject: { query: key }\n",
    );
    const openai = provider(rules, "openai");
    expect(openai.fromCatalogue).toBe(false);
    expect(openai.credentials).toEqual(["OPENAI_API_KEY", "OPENAI_API_KEY_2"]);
    expect(openai.pool.strategy).toBe("round_robin");
    expect(openai.hosts.map((h) => h.host)).toEqual(["api.openai.com"]);
    expect(openai.placeholder).toEqual({ env: ["OPENAI_API_KEY", "CODEX_API_KEY"], prefix: "sk-kb-" });
    expect(openai.inject).toEqual({ headers: ["authorization"], format: "Bearer {secret}" });
    // `inject` given in the file replaces the catalogue's whole inject block.
    expect(provider(rules, "gemini").inject).toEqual({ headers: [], query: "key" });
    expect(provider(rules, "gemini").credentials).toEqual(["GEMINI_API_KEY"]);
    expect(provider(rules, "gemini").credentialAliases).toEqual([
      "GOOGLE_API_KEY",
      "GOOGLE_GENERATIVE_AI_API_KEY",
    ]);
    expect(provider(rules, "anthropic").fromCatalogue).toBe(true);
    expect(rules.providers[0]?.id).toBe("openai");
  });

  it("keeps an empty entry as the catalogue's, and drops the rest with catalogue: false", () => {
    const rules = parse("catalogue: false\nproviders:\n  openai:\n  anthropic: {}\n");
    expect(rules.providers.map((p) => p.id)).toEqual(["openai", "anthropic"]);
    expect(provider(rules, "openai").hosts[0]?.host).toBe("api.openai.com");
  });

  it("fills defaults for a provider of the file", () => {
    const rules = parse(
      "providers:\n  my-llm: { hosts: [llm.example.com] }\n  other: { hosts: [o.example.com], inject: { header: X-Key } }\n",
    );
    expect(provider(rules, "my-llm")).toEqual({
      id: "my-llm",
      kind: "key_pool",
      hosts: [{ source: "llm.example.com", host: "llm.example.com", wildcard: false, port: 443 }],
      inject: { headers: ["authorization"], format: "Bearer {secret}" },
      credentials: ["MY_LLM_API_KEY"],
      credentialAliases: [],
      pool: { strategy: "fill_first" },
      headers: { set: {}, remove: [] },
      placeholder: { env: ["MY_LLM_API_KEY"], prefix: "kb-" },
      policy: [],
      allowPrivateUpstream: false,
      fromCatalogue: false,
    });
    expect(provider(rules, "other").inject).toEqual({ headers: ["x-key"], format: "{secret}" });
  });

  it("gives an -oauth provider no API-key credential", () => {
    const rules = parse(
      [
        "providers:",
        "  codex-oauth:",
        "    hosts: [chatgpt.com]",
        "    oauth:",
        "      device_authorization_endpoint: https://auth.example.com/device",
        "      token_endpoint: https://auth.example.com/token",
        "      client_id: app_1",
      ].join("\n"),
    );
    const codex = provider(rules, "codex-oauth", "oauth_login");
    expect(codex.credentials).toEqual([]);
    expect(codex.placeholder.env).toEqual(["CODEX_OAUTH_ACCESS_TOKEN"]);
    expect(codex.inject).toEqual({ headers: ["authorization"], format: "Bearer {secret}" });
    expect(codex.oauth).toEqual({
      grant: "device",
      deviceAuthorizationEndpoint: "https://auth.example.com/device",
      tokenEndpoint: "https://auth.example.com/token",
      clientId: "app_1",
      clientAuth: "none",
      scopes: [],
      authorizeParams: {},
      tokenParams: {},
      tokenHeaders: {},
      maxResponseBytes: 1024 * 1024,
      tokenTimeoutMs: 10_000,
    });
  });

  it("compiles every key of an oauth block", () => {
    const rules = parse(
      [
        "providers:",
        "  partner:",
        "    hosts: [api.partner.example]",
        "    oauth:",
        "      grant: pkce",
        "      issuer: https://idp.partner.example",
        "      revocation_endpoint: https://idp.partner.example/revoke",
        "      client_id: svc-1",
        "      client_secret: env:PARTNER_SECRET",
        "      client_auth: client_secret_post",
        "      scopes: [read, offline_access]",
        "      authorize_params: { audience: api }",
        "      token_params: { resource: https://api.partner.example }",
        "      redirect_uri: http://localhost:9000/cb",
        "      token_headers: { User-Agent: kb/1 }",
        "      max_response_bytes: 64KiB",
        "      token_timeout: 2s",
      ].join("\n"),
    );
    const partner = provider(rules, "partner", "oauth_login");
    expect(partner.credentials).toEqual([]);
    expect(partner.placeholder.env).toEqual(["PARTNER_ACCESS_TOKEN"]);
    expect(partner.oauth).toEqual({
      grant: "pkce",
      issuer: "https://idp.partner.example",
      revocationEndpoint: "https://idp.partner.example/revoke",
      clientId: "svc-1",
      clientSecret: "env:PARTNER_SECRET",
      clientAuth: "client_secret_post",
      scopes: ["read", "offline_access"],
      authorizeParams: { audience: "api" },
      tokenParams: { resource: "https://api.partner.example" },
      redirectUri: "http://localhost:9000/cb",
      tokenHeaders: { "user-agent": "kb/1" },
      maxResponseBytes: 64 * 1024,
      tokenTimeoutMs: 2000,
    });
  });

  it("names the path of every oauth mistake", () => {
    const found = problems(
      [
        "providers:",
        "  p:",
        "    hosts: [p.example]",
        "    credentials: [P_KEY]",
        "    oauth:",
        "      grant: client_credentials",
        "      client_id: c",
        "      scope: [x]",
        "      token_params: { grant_type: password }",
        "      redirect_uri: http://example.com/cb",
        "      token_headers: { authorization: x }",
        "      token_timeout: 0s",
        "      api_base_field: access_token",
        "      refresh_token_header: content-type",
        "      device_pkce: yes-please",
      ].join("\n"),
    );
    expect(found).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          path: "providers.p.oauth",
          message: expect.stringContaining('unknown key "scope"'),
        }),
        expect.objectContaining({
          path: "providers.p.oauth.token_params.grant_type",
          message: expect.stringContaining("sets this parameter itself"),
        }),
        expect.objectContaining({
          path: "providers.p.oauth.redirect_uri",
          message: expect.stringContaining("http://127.0.0.1:<port>"),
        }),
        expect.objectContaining({
          path: "providers.p.oauth.token_headers.authorization",
          message: expect.stringContaining("itself"),
        }),
        expect.objectContaining({
          path: "providers.p.oauth.token_timeout",
          message: expect.stringContaining("more than zero"),
        }),
        expect.objectContaining({
          path: "providers.p.oauth.api_base_field",
          message: expect.stringContaining("a token is never shown"),
        }),
        expect.objectContaining({
          path: "providers.p.oauth.refresh_token_header",
          message: expect.stringContaining("itself"),
        }),
        expect.objectContaining({
          path: "providers.p.oauth.device_pkce",
          message: expect.stringContaining("true or false"),
        }),
      ]),
    );
    const missing = problems(
      "providers:\n  p:\n    hosts: [p.example]\n    oauth: { grant: client_credentials, client_id: c }\n",
    );
    expect(missing).toMatchObject([
      expect.objectContaining({
        path: "providers.p.oauth.token_endpoint",
        message: expect.stringContaining("required key is missing"),
      }),
      expect.objectContaining({
        path: "providers.p.oauth.client_secret",
        message: expect.stringContaining("client_credentials needs"),
      }),
    ]);
    expect(
      problems(
        "providers:\n  p:\n    hosts: [p.example]\n    credentials: [K]\n    oauth: { token_endpoint: https://a.example/t, client_id: c, device_authorization_endpoint: https://a.example/d }\n",
      ),
    ).toMatchObject([
      { path: "providers.p.credentials", message: expect.stringContaining("credentials are its logins") },
    ]);
  });

  it("rejects an -oauth provider with credentials or without oauth", () => {
    expect(problems("providers:\n  x-oauth: { hosts: [x.example.com], credentials: [X] }\n")).toMatchObject([
      { path: "providers.x-oauth", message: expect.stringContaining("add an oauth block") },
      { path: "providers.x-oauth.credentials", message: expect.stringContaining("remove credentials") },
    ]);
  });

  it("compiles pool options, headers, policy and auth", () => {
    const rules = parse(
      [
        "providers:",
        "  github:",
        "    hosts: [api.github.com]",
        "    inject: { basic: { username: x-access-token } }",
        "    pool: { strategy: least_used, affinity: client, retry_body_limit: 1MiB, cooldown: 90s }",
        "    headers: { set: { User-Agent: a/1 }, remove: [X-Stainless-OS] }",
        "    policy:",
        "      - deny: { method: delete, path: /repos/** }",
        "      - approve: { method: [PUT, patch] }",
        "  bedrock:",
        "    upstream: https://bedrock-runtime.us-east-1.amazonaws.com/",
        "    auth: { aws_sigv4: { region: us-east-1, service: bedrock, access_key_id: A, secret_access_key: file:aws/secret } }",
      ].join("\n"),
    );
    const github = provider(rules, "github");
    expect(github.inject).toEqual({ headers: [], basic: { username: "x-access-token" } });
    expect(github.pool).toEqual({
      strategy: "least_used",
      affinity: "client",
      retryBodyLimit: 1024 * 1024,
      cooldownMs: 90_000,
    });
    expect(github.headers).toEqual({ set: { "user-agent": "a/1" }, remove: ["x-stainless-os"] });
    expect(github.policy).toEqual([
      { action: "deny", methods: ["DELETE"], paths: ["/repos/**"] },
      { action: "approve", methods: ["PUT", "PATCH"], paths: [] },
    ]);
    const bedrock = provider(rules, "bedrock", "aws_sigv4");
    expect(bedrock.mount).toBe("/p/bedrock");
    expect(bedrock.upstream).toBe("https://bedrock-runtime.us-east-1.amazonaws.com");
    expect(bedrock.credentials).toEqual([]);
    expect(bedrock.auth).toEqual({
      kind: "aws_sigv4",
      region: "us-east-1",
      service: "bedrock",
      accessKeyId: "A",
      secretAccessKey: `file:${BASE}/aws/secret`,
    });
  });

  it("rejects headers keybroker manages and ill-formed policy and auth", () => {
    const found = problems(
      [
        "providers:",
        "  x:",
        "    hosts: [x.example.com]",
        "    headers: { set: { Host: evil.example.com } }",
        "    policy: [{ deny: {}, approve: {} }, { deny: { path: repos } }]",
        "    auth: { scopes: [a] }",
      ].join("\n"),
    );
    expect(found.map((p) => p.path)).toEqual([
      "providers.x.headers.set.Host",
      "providers.x.policy[0]",
      "providers.x.policy[1].deny.path",
      "providers.x.auth",
    ]);
  });

  it("compiles case: insensitive on a policy rule, and names a typo or a wrong value", () => {
    const rules = parse(
      [
        "providers:",
        "  x:",
        "    hosts: [x.example.com]",
        "    policy:",
        "      - deny: { method: DELETE, path: /repos/**, case: insensitive }",
        "      - approve: { path: /admin/**, case: sensitive }",
      ].join("\n"),
    );
    expect(provider(rules, "x").policy).toEqual([
      { action: "deny", methods: ["DELETE"], paths: ["/repos/**"], ignoreCase: true },
      { action: "approve", methods: [], paths: ["/admin/**"] },
    ]);
    const found = problems(
      [
        "providers:",
        "  x:",
        "    hosts: [x.example.com]",
        "    policy:",
        "      - deny: { path: /repos/**, cases: insensitive }",
        "      - deny: { path: /repos/**, case: insensitve }",
        "      - deny: { path: /repos/**, case: true }",
      ].join("\n"),
    );
    expect(found).toMatchObject([
      { path: "providers.x.policy[0].deny", message: 'unknown key "cases" — did you mean "case"?' },
      {
        path: "providers.x.policy[1].deny.case",
        message: expect.stringContaining('did you mean "insensitive"?'),
      },
      { path: "providers.x.policy[2].deny.case", message: 'true is not one of "sensitive", "insensitive"' },
    ]);
  });

  it("resolves relative paths against the rule file's folder and expands ~", () => {
    const rules = parse(
      [
        "upstream_ca: [./corp-root.pem, ~/certs/extra.pem, /abs/root.pem]",
        "sources: { dotenv: ../secrets/.env }",
        "providers:",
        "  openai: { credentials: [file:keys/openai, file:~/k, file:/run/x] }",
        "  vertex:",
        "    upstream: https://us-central1-aiplatform.googleapis.com",
        '    auth: { google_service_account: "file:~/keys/vertex-sa.json", scopes: [s1] }',
        "clients: { a: { token: file:tok } }",
      ].join("\n"),
    );
    const home = homedir();
    expect(rules.upstreamCa).toEqual([
      `${BASE}/corp-root.pem`,
      join(home, "certs/extra.pem"),
      "/abs/root.pem",
    ]);
    expect(rules.sources.dotenv).toBe("/etc/secrets/.env");
    expect(provider(rules, "openai").credentials).toEqual([
      `file:${BASE}/keys/openai`,
      `file:${join(home, "k")}`,
      "file:/run/x",
    ]);
    expect(provider(rules, "vertex", "google_service_account").auth).toEqual({
      kind: "google_service_account",
      key: `file:${join(home, "keys/vertex-sa.json")}`,
      scopes: ["s1"],
    });
    expect(rules.clients[0]?.token).toBe(`file:${BASE}/tok`);
  });

  it("normalizes resolve keys and requires ports", () => {
    const rules = parse('resolve: { "API.OpenAI.com.:443": "127.0.0.1:9443", "[::1]:8443": "[::1]:9444" }\n');
    expect([...rules.resolve]).toEqual([
      ["api.openai.com:443", { host: "127.0.0.1", port: 9443 }],
      ["[::1]:8443", { host: "::1", port: 9444 }],
    ]);
    expect(problems('resolve: { "api.openai.com": "127.0.0.1" }\n').map((p) => p.message)).toEqual([
      expect.stringContaining("the port is missing"),
    ]);
  });

  it("fills source defaults", () => {
    const rules = parse("sources:\n  infisical: { project_id: p1, environment: dev }\n");
    expect(rules.sources).toEqual({
      order: ["infisical", "dotenv", "env"],
      infisical: {
        siteUrl: "https://app.infisical.com",
        projectId: "p1",
        environment: "dev",
        path: "/",
        clientId: "env:INFISICAL_CLIENT_ID",
        clientSecret: "env:INFISICAL_CLIENT_SECRET",
        ttlMs: 60_000,
      },
    });
  });

  it.each([
    ["5m", 300_000],
    ["500ms", 500],
    ["1h", 3_600_000],
    [30, 30_000],
    ["1.5s", 1500],
  ])("reads the duration %j", (ttl, ms) => {
    const rules = parse(
      `sources:\n  infisical: { project_id: p, environment: e, ttl: ${JSON.stringify(ttl)} }\n`,
    );
    expect(rules.sources.infisical?.ttlMs).toBe(ms);
  });

  it("defaults a client to every provider with the user role", () => {
    const rules = parse("clients: { cron: { token: T } }\n");
    expect(rules.clients).toEqual([{ name: "cron", token: "T", providers: "*", role: "user" }]);
    expect(rules.approvals).toEqual({ timeoutMs: 120_000, maxPending: 64, maxBytes: 64 * 1024 * 1024 });
  });

  it("rejects a policy rule scoped to a client the file does not define", () => {
    const found = problems(
      [
        "providers:",
        "  x:",
        "    hosts: [x.example.com]",
        "    policy: [{ deny: { clients: [crom, nobody] } }]",
        "clients: { cron: {}, default: {} }",
      ].join("\n"),
    );
    expect(found.map((p) => [p.path, p.message])).toEqual([
      ["providers.x.policy[0].deny.clients[0]", 'no client named "crom" — did you mean "cron"?'],
      ["providers.x.policy[0].deny.clients[1]", 'no client named "nobody" — known: cron, default'],
    ]);
  });

  it("rejects an unknown role, a deny rule with a timeout, a bad rpm and a scoped rule naming no valid client", () => {
    const found = problems(
      [
        "providers:",
        "  x:",
        "    hosts: [x.example.com]",
        "    policy:",
        "      - deny: { method: POST, timeout: 5s }",
        "      - approve: { roles: [boss], clients: ['bad name'] }",
        "clients:",
        "  a: { role: superuser, limits: { rpm: 0 } }",
        "approvals: { timeout: 0s, max_pending: 0, max_bytes: 12 apples }",
      ].join("\n"),
    );
    expect(found.map((p) => [p.path, p.message])).toEqual([
      ["providers.x.policy[0].deny.timeout", expect.stringContaining("timeout belongs to approve rules")],
      ["providers.x.policy[1].approve.roles[0]", '"boss" is not one of "owner", "admin", "user", "guest"'],
      ["providers.x.policy[1].approve.clients[0]", expect.stringContaining("not a valid client name")],
      ["clients.a.role", '"superuser" is not one of "owner", "admin", "user", "guest"'],
      ["clients.a.limits.rpm", "must be at least 1"],
      ["approvals.timeout", expect.stringContaining("more than zero")],
      ["approvals.max_pending", "must be at least 1"],
      ["approvals.max_bytes", expect.stringContaining("is not a size")],
    ]);
  });

  it("reads the bounds of held requests (docs/spec.md §3.10)", () => {
    const rules = parse("approvals: { max_pending: 2, max_bytes: 16KiB }\n");
    expect(rules.approvals).toEqual({ timeoutMs: 120_000, maxPending: 2, maxBytes: 16 * 1024 });
  });
});

describe("the docs/spec.md §4 example", () => {
  const path = join(import.meta.dirname, "../../fixtures/rules/spec-example.yaml");

  it("parses and compiles", () => {
    const rules = parseRules(readFileSync(path, "utf8"), path, "/work/project");
    expect(rules.listen).toEqual({ host: "127.0.0.1", port: 8899 });
    expect(rules.upstreamCa).toEqual(["/work/project/corp-root.pem"]);
    expect(rules.sources.order).toEqual(["infisical", "dotenv", "env"]);
    expect(rules.sources.infisical).toMatchObject({ environment: "prod", path: "/agents", ttlMs: 60_000 });
    expect(provider(rules, "openai").headers.set).toEqual({ "user-agent": "my-agent/1.0" });
    expect(provider(rules, "anthropic").credentials).toEqual([
      "infisical:/llm/ANTHROPIC_API_KEY",
      "file:/run/secrets/anthropic",
    ]);
    expect(provider(rules, "github").policy).toEqual([
      { action: "deny", methods: ["DELETE"], paths: ["/repos/**"] },
      { action: "approve", methods: ["PUT", "PATCH"], paths: ["/repos/*/*/branches/**"], timeoutMs: 120_000 },
      { action: "deny", methods: ["POST"], paths: ["/repos/*/*/issues"], roles: ["guest"] },
    ]);
    expect(rules.approvals).toEqual({ timeoutMs: 120_000, maxPending: 64, maxBytes: 64 * 1024 * 1024 });
    expect(provider(rules, "vertex")).toMatchObject({ mount: "/p/vertex", hosts: [], credentials: [] });
    expect(provider(rules, "bedrock", "aws_sigv4").auth.kind).toBe("aws_sigv4");
    expect(provider(rules, "codex-oauth").credentials).toEqual([]);
    expect(rules.fallbacks).toEqual({ openai: ["openrouter"] });
    expect(rules.clients).toEqual([
      { name: "default", providers: "*", role: "user" },
      { name: "cron", token: "KB_CRON_TOKEN", providers: ["openai"], role: "user", rpm: 30 },
      { name: "guest", token: "KB_GUEST_TOKEN", providers: ["github"], role: "guest" },
      { name: "admin", token: "KB_ADMIN_TOKEN", providers: "*", role: "owner" },
    ]);
  });
});

describe("finding and loading the rule file", () => {
  let dir: string;
  let cwd: string;
  let home: string;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "kb-rules-"));
    cwd = join(dir, "project");
    home = join(dir, "home");
    mkdirSync(cwd);
    mkdirSync(home);
  });

  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it("looks at --config, $KEYBROKER_CONFIG, ./keybroker.yaml, then the home", () => {
    const named = join(dir, "named.yaml");
    const fromEnv = join(dir, "env.yaml");
    for (const f of [named, fromEnv, join(cwd, "keybroker.yaml"), join(home, "keybroker.yaml")])
      writeFileSync(f, "");
    const env = { KEYBROKER_CONFIG: fromEnv };
    expect(findRuleFile({ config: "../named.yaml", env, cwd, home })).toBe(named);
    expect(findRuleFile({ env, cwd, home })).toBe(fromEnv);
    expect(findRuleFile({ env: {}, cwd, home })).toBe(join(cwd, "keybroker.yaml"));
    rmSync(join(cwd, "keybroker.yaml"));
    expect(findRuleFile({ env: { KEYBROKER_CONFIG: "" }, cwd, home })).toBe(join(home, "keybroker.yaml"));
    rmSync(join(home, "keybroker.yaml"));
    expect(findRuleFile({ env: {}, cwd, home })).toBeUndefined();
  });

  it("fails when an explicitly named file does not exist", () => {
    expect(() => findRuleFile({ config: "missing.yaml", env: {}, cwd, home })).toThrow(RuleFileError);
    expect(() => findRuleFile({ config: "missing.yaml", env: {}, cwd, home })).toThrow(
      `the rule file named by --config: ${join(cwd, "missing.yaml")} does not exist`,
    );
    expect(() => findRuleFile({ env: { KEYBROKER_CONFIG: join(dir, "nope.yaml") }, cwd, home })).toThrow(
      "named by KEYBROKER_CONFIG",
    );
    expect(() => findRuleFile({ config: home, env: {}, cwd, home })).toThrow("is not a file");
  });

  it("loads the embedded catalogue when there is no file", () => {
    const rules = loadRules(undefined);
    expect(rules.origin).toBe("embedded default catalogue");
    expect(rules.providers.length).toBeGreaterThanOrEqual(14);
  });

  it("loads a file with paths relative to its folder, and names it in errors", () => {
    const file = join(cwd, "keybroker.yaml");
    writeFileSync(file, "version: 1\nsources: { dotenv: .env }\n");
    expect(loadRules(file).sources.dotenv).toBe(join(cwd, ".env"));
    writeFileSync(file, "version: 1\nintercept: some\n");
    expect(() => loadRules(file)).toThrow(`invalid rule file ${file} (1 problem):`);
    expect(() => loadRules(join(cwd, "gone.yaml"))).toThrow("cannot read the rule file: it does not exist");
  });
});

describe("audit settings", () => {
  it("refuses require: true with the audit log turned off, naming the path", () => {
    const err = failure("audit: { enabled: false, require: true }\n");
    expect(err.problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      "audit.require: cannot require an audit log that is turned off (enabled: false): remove one of the two",
    ]);
    expect(err.message).toContain("audit.require: cannot require an audit log that is turned off");
    // Either one alone is fine.
    expect(parse("audit: { enabled: false }\n").audit).toMatchObject({ enabled: false, require: false });
    expect(parse("audit: { require: true }\n").audit).toMatchObject({ enabled: true, require: true });
  });
});
