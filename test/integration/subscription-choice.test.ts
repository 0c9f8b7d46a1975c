// docs/spec.md §19: when a client has both an API key and a subscription login for one host
// (anthropic and claude-oauth on api.anthropic.com), `env`/`run` say which one they export,
// and `--use` exports only the chosen one, so nobody is billed on the API without being told.
import { afterEach, expect, it } from "vitest";
import { FileTokenStore } from "../../state/tokens/home.js";
import { subscriptionRules } from "../helpers/fake-subscriptions.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { oauthLeaks } from "../helpers/oauth-leaks.js";

const REAL = "sk-ant-oat01-real-subscription-token-000000000000";
const open: InProcessFixture[] = [];
afterEach(async () => {
  for (const f of open.splice(0)) {
    await f.close();
    expect(oauthLeaks(f, [REAL, `${REAL}-codex`])).toEqual([]);
  }
});

it("an API key and a subscription on one host: env names the one it exports; --use picks", async () => {
  const f = await startInProcessFixture({ rules: (u) => subscriptionRules(u) });
  open.push(f);
  const env = async (...args: string[]) => {
    const r = await f.cli(["env", "--format", "json", ...args]);
    return { ...r, vars: r.status === 0 ? (JSON.parse(r.stdout) as Record<string, string>) : {} };
  };
  // No subscription login yet: nothing to choose between.
  const before = await env();
  expect(before.vars.ANTHROPIC_API_KEY).toBeDefined();
  expect(before.stderr).not.toContain("claude-oauth");
  const now = Date.now();
  await new FileTokenStore(f.home).put({
    provider: "claude-oauth",
    id: "default",
    accessToken: REAL,
    expiresAt: now + 3_600_000,
    issuedAt: now,
    createdAt: now,
    generation: 1,
    state: "ok",
  });
  const told = await env();
  expect(told.stderr).toContain("both anthropic (an API key, billed per request) and claude-oauth");
  expect(told.stderr).toContain("--use claude-oauth");
  const chosen = await env("--use", "claude-oauth");
  expect(chosen.status, chosen.stderr).toBe(0);
  expect(chosen.vars.ANTHROPIC_API_KEY).toBeUndefined();
  expect(chosen.vars.CLAUDE_OAUTH_ACCESS_TOKEN).toBeDefined();
  expect(chosen.stderr).toContain("api.anthropic.com: exporting claude-oauth's variable (the subscription)");
  const key = await env("--use", "anthropic");
  expect(key.vars.CLAUDE_OAUTH_ACCESS_TOKEN).toBeUndefined();
  expect(key.vars.ANTHROPIC_API_KEY).toBeDefined();
  // Codex's API key (api.openai.com) and its ChatGPT sign-in (chatgpt.com) are on two hosts,
  // but one agent: it prefers CODEX_API_KEY/OPENAI_API_KEY when it finds them.
  await new FileTokenStore(f.home).put({
    provider: "codex-oauth",
    id: "default",
    accessToken: `${REAL}-codex`,
    issuedAt: now,
    createdAt: now,
    generation: 1,
    state: "ok",
  });
  expect((await env()).stderr).toContain("both openai (an API key, billed per request) and codex-oauth");
  const codex = await env("--use", "codex-oauth");
  expect(codex.vars.OPENAI_API_KEY).toBeUndefined();
  expect(codex.vars.CODEX_API_KEY).toBeUndefined();
  expect(codex.vars.ANTHROPIC_API_KEY).toBeDefined();
  const wrong = await env("--use", "nosuch");
  expect(wrong.status).not.toBe(0);
  expect(wrong.stderr).toContain('--use nosuch: the client gets no provider "nosuch"');
}, 60_000);
