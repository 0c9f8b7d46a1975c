// `grant: client_credentials` (docs/spec.md §8): no login at all; the broker fetches the token from
// client_id and client_secret through its own upstream agent (the token endpoint's host is
// reachable only by the rule file's `resolve` and trusted only by its `upstream_ca`), injects
// it, and fetches the next one before the current one expires, with no request waiting on it.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { chatThroughBroker, type FakeOAuth, installFakeOAuth, upstreamRules } from "../helpers/fake-oauth.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { oauthLeaks } from "../helpers/oauth-leaks.js";
import type { FakeUpstream } from "../helpers/upstream.js";

const CLIENT_SECRET = "cs-partner-5e1d9a7c3b0f4e2d8a6c1b9e7f5d3a10";

function rules(u: FakeUpstream): string {
  return `${upstreamRules(u, ["api.partner.example", "idp.partner.example"])}providers:
  partner-api:
    hosts: [api.partner.example]
    placeholder: { env: PARTNER_TOKEN }
    oauth:
      grant: client_credentials
      token_endpoint: https://idp.partner.example/token
      client_id: svc-1
      client_secret: env:PARTNER_CLIENT_SECRET
      token_timeout: 2s
`;
}

let f: InProcessFixture;
let fake: FakeOAuth;
afterAll(async () => {
  await f.close();
  expect(oauthLeaks(f, fake.issued, [CLIENT_SECRET])).toEqual([]);
});

const until = async (what: () => boolean) => {
  const deadline = Date.now() + 15_000;
  while (!what() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
  return what();
};

describe("grant: client_credentials", () => {
  it("fetches a token without any login, again ahead of expiry and after a 401; a wrong secret is a clear 503", async () => {
    f = await startInProcessFixture({
      env: { PARTNER_CLIENT_SECRET: CLIENT_SECRET },
      rules: (u) => {
        fake = installFakeOAuth(u, { clientId: "svc-1", clientSecret: "not-yet-the-right-one" });
        u.routes.set("POST /v1/chat/completions", (req, res) => {
          const token = String(req.headers.authorization ?? "").replace(/^Bearer /, "");
          const ok = fake.valid(token);
          res.writeHead(ok ? 200 : 401, { "content-type": "application/json" });
          res.end(JSON.stringify(ok ? { ok: true } : { error: { message: "invalid token" } }));
        });
        return rules(u);
      },
    });
    const placeholder = f.placeholders().PARTNER_TOKEN!;
    expect(placeholder).toBeDefined();
    const agent = f.proxyAgent();
    const call = () =>
      chatThroughBroker(agent, placeholder, "https://api.partner.example/v1/chat/completions");

    // The authorization server refuses the client: a fast 503 that says why, nothing injected.
    const refused = await call();
    expect(refused.status).toBe(503);
    expect(refused.headers["x-keybroker-error"]).toBe("credential_unavailable");
    expect(JSON.parse(refused.text).error.message).toContain("invalid_client");
    expect(fake.clientTokens).toEqual([]);

    // The right secret: the broker fetches a token (client_secret_basic) and injects it.
    fake.clientSecret = CLIENT_SECRET;
    fake.accessTtl = 2;
    // A failed fetch is remembered for 2 s, then the next request tries again.
    let served = await call();
    const deadline = Date.now() + 10_000;
    while (served.status !== 200 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      served = await call();
    }
    expect(served.status).toBe(200);
    const first = fake.clientTokens.at(-1)!;
    const sent = f.upstream.received.filter((r) => r.url === "/v1/chat/completions").at(-1)!;
    expect(sent.headers.authorization).toBe(`Bearer ${first}`);

    // No request is sent now: the next tokens come from the broker's own timer, each one
    // before the one it replaces expires (the fake's tokens live 2 s).
    const count = fake.clientTokens.length;
    expect(await until(() => fake.clientTokens.length >= count + 2)).toBe(true);
    const again = await call();
    expect(again.status).toBe(200);
    const latest = f.upstream.received.filter((r) => r.url === "/v1/chat/completions").at(-1)!;
    expect(latest.headers.authorization).not.toBe(`Bearer ${first}`);
    expect(fake.clientTokens).toContain(String(latest.headers.authorization).slice("Bearer ".length));

    // The upstream refuses the token (revoked at the server): fetched again once, and the
    // request is sent again with the new one; the client sees only the 200.
    fake.revokeAll();
    const before = fake.clientTokens.length;
    const sentBefore = f.upstream.received.length;
    const retried = await call();
    expect(retried.status).toBe(200);
    expect(fake.clientTokens.length).toBeGreaterThan(before);
    const attempts = f.upstream.received.slice(sentBefore).filter((r) => r.url === "/v1/chat/completions");
    expect(attempts.map((r) => r.headers.authorization)).toEqual([
      expect.any(String),
      `Bearer ${fake.clientTokens.at(-1)}`,
    ]);

    const status = await f.cli(["status"]);
    expect(status.stdout).toContain("OAuth client credentials");
    await agent.close();
    const audit = readFileSync(join(f.home, "audit", "audit.jsonl"), "utf8");
    expect(audit).toContain('"decision":"refreshed","provider":"partner-api"');
    // No person logged in: no login line in either chain.
    expect(audit).not.toContain('"decision":"login"');
  }, 60_000);
});
