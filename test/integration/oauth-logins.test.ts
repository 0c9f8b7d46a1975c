// OAuth logins as pool credentials (docs/spec.md §7, §8): a running broker follows the token store
// (a login added, replaced or removed is used at once), injects the access token as Bearer,
// marks only the login that got a quota answer, and answers 401 reauth_required with the
// command to run when no login can serve.
import { statSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { join } from "node:path";
import { type ProxyAgent, request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { FileTokenStore } from "../../state/tokens/home.js";
import type { StoredLogin } from "../../state/tokens/login.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { oauthLeaks } from "../helpers/oauth-leaks.js";
import type { FakeUpstream } from "../helpers/upstream.js";

const TOKEN_WORK = "at-work-1111111111111111111111111111";
const TOKEN_WORK_2 = "at-work-2222222222222222222222222222";
const TOKEN_SPARE = "at-spare-333333333333333333333333333";
const REFRESH = "rt-never-shown-44444444444444444444444";
const TOKENS = [TOKEN_WORK, TOKEN_WORK_2, TOKEN_SPARE, REFRESH];

function rules(u: FakeUpstream): string {
  return `version: 1
upstream_ca: [${JSON.stringify(u.caPath)}]
resolve: { "api.openai.com:443": "127.0.0.1:${u.port}" }
catalogue: false
providers:
  codex-oauth:
    hosts: [api.openai.com]
    oauth:
      device_authorization_endpoint: https://auth.example.com/device
      token_endpoint: https://auth.example.com/token
      client_id: app_1
`;
}

function login(id: string, accessToken: string, createdAt = Date.now()): StoredLogin {
  return {
    provider: "codex-oauth",
    id,
    accessToken,
    refreshToken: REFRESH,
    expiresAt: Date.now() + 3_600_000,
    issuedAt: Date.now(),
    createdAt,
    generation: 1,
    state: "ok",
  };
}

const open: InProcessFixture[] = [];
afterEach(async () => {
  for (const f of open.splice(0)) {
    await f.close();
    expect(oauthLeaks(f, TOKENS)).toEqual([]);
  }
});

/** The fake provider answers 429 to the tokens in `exhausted` and records which token came. */
function provider(u: FakeUpstream, exhausted: Set<string>): string[] {
  const seen: string[] = [];
  u.routes.set("POST /v1/chat/completions", (req: IncomingMessage, res: ServerResponse) => {
    const token = String(req.headers.authorization ?? "").replace(/^Bearer /, "");
    seen.push(token);
    if (exhausted.has(token)) {
      res.writeHead(429, { "content-type": "application/json", "retry-after": "600" });
      res.end(JSON.stringify({ error: { type: "usage_limit_reached", message: "limit" } }));
      return;
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ ok: true }));
  });
  return seen;
}

async function call(f: InProcessFixture, agent: ProxyAgent) {
  const ph = f.placeholders().CODEX_OAUTH_ACCESS_TOKEN;
  expect(ph).toBeDefined();
  const res = await request("https://api.openai.com/v1/chat/completions", {
    method: "POST",
    dispatcher: agent,
    headers: { authorization: `Bearer ${ph}`, "content-type": "application/json" },
    body: "{}",
  });
  return {
    status: res.statusCode,
    headers: res.headers,
    json: (await res.body.json()) as { error?: { hint?: string } },
  };
}

/** Repeats `fn` until `done` holds: the broker learns of store changes from a file watch. */
async function until<T>(fn: () => Promise<T>, done: (v: T) => boolean): Promise<T> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const v = await fn();
    if (done(v) || Date.now() > deadline) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

// Each test drives several processes (broker, CLI): generous on a loaded machine.
const TEST_TIMEOUT = 90_000;

describe("OAuth logins in the pool", () => {
  it(
    "follows the token store without a restart and injects the access token as Bearer",
    async () => {
      const f = await startInProcessFixture({ rules });
      open.push(f);
      const seen = provider(f.upstream, new Set());
      const agent = f.proxyAgent();
      const store = new FileTokenStore(f.home);

      const none = await call(f, agent);
      expect(none.status).toBe(401);
      expect(none.headers["x-keybroker-error"]).toBe("reauth_required");
      expect(none.json.error?.hint).toBe("keybroker auth add codex-oauth");

      await store.put(login("work", TOKEN_WORK));
      expect(
        (
          await until(
            () => call(f, agent),
            (r) => r.status === 200,
          )
        ).status,
      ).toBe(200);
      expect(seen.at(-1)).toBe(TOKEN_WORK);
      expect(statSync(join(f.home, "tokens")).mode & 0o777).toBe(0o700);
      expect(statSync(join(f.home, "tokens", "codex-oauth~work.json")).mode & 0o777).toBe(0o600);

      // Replaced by a new login with the same label: the new token at once.
      await store.put(login("work", TOKEN_WORK_2, Date.now() + 1));
      await until(
        () => call(f, agent),
        () => seen.at(-1) === TOKEN_WORK_2,
      );
      expect(seen.at(-1)).toBe(TOKEN_WORK_2);

      await store.remove("codex-oauth", "work");
      const gone = await until(
        () => call(f, agent),
        (r) => r.status === 401,
      );
      expect(gone.headers["x-keybroker-error"]).toBe("reauth_required");
      await agent.close();
    },
    TEST_TIMEOUT,
  );

  it(
    "a usage-limit answer to one login marks only that login; the other serves",
    async () => {
      const f = await startInProcessFixture({ rules });
      open.push(f);
      const seen = provider(f.upstream, new Set([TOKEN_WORK]));
      const agent = f.proxyAgent();
      const store = new FileTokenStore(f.home);
      await store.put(login("a-work", TOKEN_WORK));
      await store.put(login("b-spare", TOKEN_SPARE));
      // Until the broker holds both logins: a-work tried (429, marked), then b-spare (200). The
      // store's watcher may load them one at a time, b-spare first on a busy machine.
      await until(
        () => call(f, agent),
        (r) => r.status === 200 && seen.includes(TOKEN_WORK) && seen.includes(TOKEN_SPARE),
      );
      seen.length = 0;

      const r = await call(f, agent);
      expect(r.status).toBe(200);
      // fill_first would start at a-work: it was marked on the first 429 and is skipped now.
      expect(seen).toEqual([TOKEN_SPARE]);
      const status = JSON.parse((await f.cli(["status", "--json"])).stdout) as {
        providers: { id: string; credentials: { id: string; state: string }[] }[];
      };
      const states = Object.fromEntries(
        status.providers.find((p) => p.id === "codex-oauth")!.credentials.map((c) => [c.id, c.state]),
      );
      expect(states).toEqual({ "a-work": "usage_limit_reached", "b-spare": "ok" });

      // auth reset --credential names a login: only its mark goes, and it serves again.
      const unknown = await f.cli(["auth", "reset", "codex-oauth", "--credential", "nope"]);
      expect(unknown.status).toBe(1);
      expect(unknown.stderr).toContain('has no login "nope"; its logins: a-work, b-spare');
      const reset = await f.cli(["auth", "reset", "codex-oauth", "--credential", "a-work"]);
      expect(reset.status, reset.stderr).toBe(0);
      expect(reset.stdout).toContain("cleared a-work");
      seen.length = 0;
      expect((await call(f, agent)).status).toBe(200);
      expect(seen[0]).toBe(TOKEN_WORK);
      await agent.close();
    },
    TEST_TIMEOUT,
  );
});
