// The request stages that check a request before any credential is chosen, each on an exchange
// built in the test (test/helpers/exchange.ts): what it refuses, and what it lets through.
import { beforeAll, describe, expect, it } from "vitest";
import { BrokerError } from "../../../../core/errors.js";
import { matchProvider } from "../../../../proxy/pipeline.js";
import type { Runtime } from "../../../../proxy/runtime.js";
import { applyPolicy } from "../../../../proxy/stages/apply-policy.js";
import { canonicalizePath } from "../../../../proxy/stages/canonicalize-path.js";
import { checkHostBinding } from "../../../../proxy/stages/check-host-binding.js";
import { checkPlaceholders } from "../../../../proxy/stages/check-placeholders.js";
import { checkRole } from "../../../../proxy/stages/check-role.js";
import { createRequireAudit } from "../../../../proxy/stages/require-audit.js";
import { type RequestInit, sentHeader, testExchange, testRuntime } from "../../../helpers/exchange.js";

const RULES = `catalogue: false
providers:
  openai:
    hosts: [api.openai.com]
    credentials: [OPENAI_API_KEY]
  github:
    hosts: [api.github.com]
    credentials: [GITHUB_TOKEN]
    policy:
      - deny: { method: DELETE, path: "/repos/**" }
      - approve: { method: POST, path: "/repos/*/*/pulls", roles: [user] }
clients:
  default: { role: owner }
  agent: { role: user }
  reader: { role: guest }
audit: { require: true }
`;
const ENV = { OPENAI_API_KEY: "sk-stage-test-openai", GITHUB_TOKEN: "ghp_stagetestgithub" };

let rt: Runtime;
beforeAll(async () => {
  rt = await testRuntime(RULES, ENV);
});

/** The exchange after matchProvider, as every later stage sees it. */
function matched(init: RequestInit) {
  const x = testExchange(rt, init);
  matchProvider(x);
  return x;
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

describe("matchProvider", () => {
  it("finds the provider by host and port, none for another host or port", () => {
    expect(matched({ host: "api.openai.com" }).provider?.rule.id).toBe("openai");
    expect(matched({ host: "api.openai.com", port: 8443 }).provider).toBeUndefined();
    expect(matched({ host: "example.org" }).provider).toBeUndefined();
  });
});

describe("checkHostBinding", () => {
  it("lets a request through when CONNECT target, SNI and Host agree, writing Host one way", () => {
    const x = matched({ host: "api.openai.com", headers: { Host: "API.OpenAI.com:443" } });
    checkHostBinding(x);
    expect(sentHeader(x, "host")).toBe("api.openai.com");
  });

  it("refuses a Host header or SNI naming another host, and a second Host header", () => {
    const host = matched({ host: "api.openai.com", headers: { host: "evil.example" } });
    expect(refusal(() => checkHostBinding(host)).code).toBe("host_mismatch");
    const sni = matched({ host: "api.openai.com", sni: "evil.example" });
    expect(refusal(() => checkHostBinding(sni)).code).toBe("host_mismatch");
    const twice = matched({ host: "api.openai.com" });
    twice.headers.push("host", "api.openai.com");
    expect(refusal(() => checkHostBinding(twice)).status).toBe(421);
  });

  it("takes a Host header spelled as it goes upstream as it is, and still refuses a different SNI", () => {
    const x = matched({ host: "api.openai.com", headers: { Host: "api.openai.com", "X-After": "1" } });
    checkHostBinding(x);
    expect(sentHeader(x, "host")).toBe("api.openai.com");
    expect(x.headers.filter((v, i) => i % 2 === 0 && v === "host")).toHaveLength(1);
    const sni = matched({ host: "api.openai.com", sni: "evil.example", headers: { Host: "api.openai.com" } });
    expect(refusal(() => checkHostBinding(sni)).code).toBe("host_mismatch");
    const port = matched({ host: "api.openai.com", headers: { Host: "api.openai.com:8443" } });
    expect(refusal(() => checkHostBinding(port)).code).toBe("host_mismatch");
  });
  it("writes each origin's own Host on another port, whatever came just before", () => {
    // Consecutive requests to different origins: the stage keeps the last host:port it wrote.
    const runs: [string, number, string][] = [
      ["api.openai.com", 8443, "api.openai.com:8443"],
      ["api.github.com", 8443, "api.github.com:8443"],
      ["api.github.com", 9443, "api.github.com:9443"],
      ["api.openai.com", 8443, "api.openai.com:8443"],
    ];
    for (const [host, port, sent] of runs) {
      const x = matched({ host, port, headers: { Host: sent.toUpperCase() } });
      checkHostBinding(x);
      expect(sentHeader(x, "host")).toBe(sent);
      const other = matched({ host, port, headers: { Host: `${host}:${port === 8443 ? 9443 : 8443}` } });
      expect(refusal(() => checkHostBinding(other)).code).toBe("host_mismatch");
    }
  });
});

describe("canonicalizePath", () => {
  it("puts the path in canonical form toward a provider with policy rules, keeping the query", () => {
    const x = matched({ host: "api.github.com", path: "/repos/a/./b/../b/pulls?x=%2F" });
    canonicalizePath(x);
    expect(x.path).toBe("/repos/a/b/pulls?x=%2F");
  });

  it("leaves the path alone toward a provider without policy, refuses one with no canonical form", () => {
    const x = matched({ host: "api.openai.com", path: "/v1/./models" });
    canonicalizePath(x);
    expect(x.path).toBe("/v1/./models");
    const bad = matched({ host: "api.github.com", path: "/repos/a%2Fb/c" });
    const err = refusal(() => canonicalizePath(bad));
    expect([err.code, err.status]).toEqual(["bad_request", 400]);
  });
});

describe("checkPlaceholders", () => {
  const openai = (client = "default") => rt.placeholders.get(client, "openai")!;

  it("records where the provider's own placeholder was seen", () => {
    const x = matched({ host: "api.openai.com", headers: { authorization: `Bearer ${openai()}` } });
    checkPlaceholders(x);
    expect(x.placeholderSeenAt).toEqual(["header authorization"]);
  });

  it("refuses a placeholder bound for another provider's host, in a header, the URL or Basic", () => {
    const header = matched({ host: "api.github.com", headers: { "x-key": openai() } });
    expect(refusal(() => checkPlaceholders(header)).code).toBe("placeholder_host_mismatch");
    const url = matched({ host: "example.org", path: `/?k=${openai()}` });
    expect(refusal(() => checkPlaceholders(url)).code).toBe("placeholder_host_mismatch");
    const basic = Buffer.from(`u:${openai()}`).toString("base64");
    const hidden = matched({ host: "api.github.com", headers: { authorization: `Basic ${basic}` } });
    expect(refusal(() => checkPlaceholders(hidden)).message).toContain("basic credentials");
  });

  it("refuses another client's placeholder, and any placeholder over plain HTTP", () => {
    const theirs = matched({
      host: "api.openai.com",
      client: "agent",
      headers: { authorization: `Bearer ${openai("reader")}` },
    });
    expect(refusal(() => checkPlaceholders(theirs)).code).toBe("client_unauthorized");
    const plain = matched({ mode: "plain", host: "api.openai.com", port: 443, headers: { "x-k": openai() } });
    expect(refusal(() => checkPlaceholders(plain)).code).toBe("bad_request");
  });
});

describe("checkRole", () => {
  it("lets a guest read and refuses it writes and upgrades; other roles may write", () => {
    checkRole(matched({ host: "api.openai.com", client: "reader", method: "HEAD" }));
    const post = matched({ host: "api.openai.com", client: "reader", method: "POST" });
    expect(refusal(() => checkRole(post)).code).toBe("policy_denied");
    const upgrade = matched({ host: "api.openai.com", client: "reader", headers: { upgrade: "websocket" } });
    expect(refusal(() => checkRole(upgrade)).message).toContain("an upgrade");
    checkRole(matched({ host: "api.openai.com", client: "agent", method: "POST" }));
  });
});

describe("applyPolicy", () => {
  it("refuses what a deny rule matches, holds what an approve rule matches for its roles", () => {
    const del = matched({ host: "api.github.com", method: "DELETE", path: "/repos/a/b" });
    const err = refusal(() => applyPolicy(del));
    expect([err.code, err.status]).toEqual(["policy_denied", 403]);
    const pr = matched({ host: "api.github.com", client: "agent", method: "POST", path: "/repos/a/b/pulls" });
    applyPolicy(pr);
    expect(pr.approval?.index).toBe(1);
  });

  it("lets through what no rule matches, and an approve rule scoped to other roles", () => {
    const get = matched({ host: "api.github.com", method: "GET", path: "/repos/a/b" });
    applyPolicy(get);
    expect(get.approval).toBeUndefined();
    const owner = matched({ host: "api.github.com", method: "POST", path: "/repos/a/b/pulls" });
    applyPolicy(owner);
    expect(owner.approval).toBeUndefined();
  });
});

describe("requireAudit", () => {
  it("refuses requests to a provider while the audit log cannot be written, none otherwise", () => {
    let writable = false;
    const stage = createRequireAudit(() => writable);
    const err = refusal(() => stage(matched({ host: "api.openai.com" })));
    expect([err.code, err.status]).toEqual(["audit_unavailable", 503]);
    stage(matched({ host: "example.org" }));
    writable = true;
    stage(matched({ host: "api.openai.com" }));
  });
});
