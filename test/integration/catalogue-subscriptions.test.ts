// docs/spec.md §6: the embedded catalogue knows the agents' subscription sign-ins. With no rule file at
// all, `keybroker auth add claude-oauth` starts the agent's own PKCE sign-in: its authorization
// endpoint, public client id, scopes and fixed loopback redirect (decision 160). codex-oauth's is
// compared with the real `codex login` in phantom-codex-login.test.ts.
import { expect, it } from "vitest";
import { startBroker } from "../helpers/broker.js";
import { authAddUrl } from "../helpers/fake-subscriptions.js";

it.each([
  [
    "claude-oauth",
    "https://claude.ai/oauth/authorize",
    {
      client_id: "9d1c250a-e61b-44d9-88ed-5944d1962f5e",
      redirect_uri: "http://localhost:53692/callback",
      scope:
        "org:create_api_key user:profile user:inference user:sessions:claude_code user:mcp_servers user:file_upload",
    },
  ],
])(
  "auth add %s needs no rule file",
  async (provider, endpoint, params) => {
    const { url, result: r } = await authAddUrl(provider);
    expect(`${url.origin}${url.pathname}`).toBe(endpoint);
    for (const [k, v] of Object.entries(params)) expect(url.searchParams.get(k), k).toBe(v);
    expect(url.searchParams.get("code_challenge_method")).toBe("S256");
    // Nobody came back within --timeout: a clear failure, nothing stored.
    expect(r.status).not.toBe(0);
    expect(r.stderr).not.toContain("unknown provider");
  },
  120_000,
);

it("a broker on the embedded catalogue names the subscription sign-ins nobody made in one info line, with no warning each", async () => {
  const broker = await startBroker({ env: { OPENAI_API_KEY: "sk-test-catalogue-start-4f1d" } });
  try {
    // The start-up lines follow the listening line: wait for the last of them.
    await expect.poll(() => broker.stderr(), { timeout: 10_000 }).toContain("subscription sign-ins");
    const lines = (broker.stdout() + broker.stderr())
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as { level: string; msg: string; providers?: string[] });
    expect(lines.filter((l) => l.level === "warn")).toEqual([]);
    const unused = lines.filter((l) => l.msg.startsWith("subscription sign-ins with no login yet"));
    expect(unused).toHaveLength(1);
    expect(unused[0]!.providers).toEqual(
      expect.arrayContaining(["codex-oauth", "claude-oauth", "gemini-oauth"]),
    );
    expect(unused[0]!.msg).toContain("keybroker auth add <provider>");
  } finally {
    await broker.stop();
  }
});
