// docs/spec.md §19 "Import" and "Login": `keybroker auth import codex|claude|gemini|hermes` takes each
// agent's existing sign-in into the token store and rewrites its file in place with phantoms
// (same mode, idempotent, no real token left in it); the phantoms then work through the broker
// (Claude's on api.anthropic.com beside an API key, Google's at tokeninfo, userinfo and
// cloudcode-pa), a forced refresh costs at most one real refresh, and `auth phantom` prints
// CLAUDE_CODE_OAUTH_TOKEN for an existing login. Every file of the agents' homes and every
// output is scanned for every real token.
import { chmodSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { findSecrets, outputs, tempHome } from "../helpers/broker.js";
import {
  ACCOUNT_ID,
  CLIENT_IDS,
  type FakeVendor,
  GEMINI_SECRET,
  installVendor,
  subscriptionRules,
} from "../helpers/fake-subscriptions.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { oauthLeaks } from "../helpers/oauth-leaks.js";

const open: { f: InProcessFixture; fakes: FakeVendor[]; agentHome: string; seen: string[] }[] = [];
afterEach(async () => {
  for (const { f, fakes, agentHome, seen } of open.splice(0)) {
    await f.close();
    const issued = fakes.flatMap((x) => x.issued);
    expect(oauthLeaks(f, issued)).toEqual([]);
    expect(findSecrets(issued, [agentHome], [...outputs, ...seen])).toEqual([]);
    for (const x of fakes) {
      expect(x.phantomsSeen).toBe(0);
      expect(x.reuses).toBe(0);
    }
  }
});

async function setup() {
  const fakes: Record<string, FakeVendor> = {};
  const f = await startInProcessFixture({
    rules: (u) => {
      for (const v of ["codex", "claude", "gemini"] as const) fakes[v] = installVendor(u, v);
      return subscriptionRules(u);
    },
  });
  const agentHome = tempHome();
  const seen: string[] = [];
  open.push({ f, fakes: Object.values(fakes), agentHome, seen });
  const agent = f.proxyAgent();
  const call = async (method: string, url: string, headers: Record<string, string>, body?: string) => {
    const res = await request(url, {
      method: method as "GET",
      dispatcher: agent,
      headers,
      ...(body === undefined ? {} : { body }),
    });
    const text = await res.body.text();
    seen.push(text);
    return { status: res.statusCode, text };
  };
  const write = (name: string, data: unknown, mode: number) => {
    const path = join(agentHome, name);
    mkdirSync(join(path, ".."), { recursive: true });
    writeFileSync(path, JSON.stringify(data));
    chmodSync(path, mode);
    return path;
  };
  const served = async (fn: () => Promise<{ status: number }>) => {
    await expect.poll(async () => (await fn()).status, { timeout: 10_000 }).toBe(200);
  };
  return {
    f,
    fakes: fakes as Record<"codex" | "claude" | "gemini", FakeVendor>,
    agentHome,
    call,
    write,
    served,
  };
}

describe("auth import and auth phantom", () => {
  it("codex and hermes: files rewritten in place with phantoms, same mode, idempotent; the phantoms work", async () => {
    const { f, fakes, call, write, served } = await setup();
    const t = fakes.codex.login();
    const path = write(
      ".codex/auth.json",
      {
        auth_mode: "chatgpt",
        OPENAI_API_KEY: "sk-proj-real-exchanged-key-0123456789",
        tokens: { ...t, account_id: ACCOUNT_ID },
        last_refresh: "2026-11-27T10:00:00Z",
      },
      0o600,
    );
    fakes.codex.issued.push("sk-proj-real-exchanged-key-0123456789");
    const r = await f.cli(["auth", "import", "codex", "--file", path]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain("3 tokens replaced by phantoms of codex-oauth/default");
    expect(statSync(path).mode & 0o777).toBe(0o600);
    const after = readFileSync(path, "utf8");
    const file = JSON.parse(after) as { tokens: Record<string, string> };
    expect(file.tokens.account_id).toBe(ACCOUNT_ID);
    // Idempotent: a second import changes nothing.
    expect((await f.cli(["auth", "import", "codex", "--file", path])).status).toBe(0);
    expect(readFileSync(path, "utf8")).toBe(after);
    const codex = () =>
      call(
        "POST",
        "https://chatgpt.com/backend-api/codex/responses",
        {
          authorization: `Bearer ${file.tokens.access_token}`,
          "chatgpt-account-id": ACCOUNT_ID,
          "content-type": "application/json",
        },
        "{}",
      );
    await served(codex);
    // hermes keeps several providers in one file: its openai-codex entry is found by its key.
    const h = fakes.codex.login();
    const hermes = write(
      ".hermes/auth.json",
      {
        version: 1,
        active_provider: "openai-codex",
        providers: {
          "openai-codex": {
            tokens: { access_token: h.access_token, refresh_token: h.refresh_token },
            last_refresh: "x",
          },
        },
      },
      0o640,
    );
    const hr = await f.cli(["auth", "import", "hermes", "--file", hermes]);
    expect(hr.status, hr.stderr).toBe(0);
    expect(hr.stdout).toContain(
      "providers.openai-codex.tokens: 2 tokens replaced by phantoms of codex-oauth/default",
    );
    expect(statSync(hermes).mode & 0o777).toBe(0o640);
  }, 90_000);

  it("claude: imported file and CLAUDE_CODE_OAUTH_TOKEN work beside an API key; a forced refresh costs one real refresh", async () => {
    const { f, fakes, call, write, served } = await setup();
    fakes.claude.accessTtl = 2;
    const t = fakes.claude.login();
    fakes.claude.accessTtl = 3600;
    const path = write(
      ".claude/.credentials.json",
      {
        claudeAiOauth: {
          accessToken: t.access_token,
          refreshToken: t.refresh_token,
          expiresAt: Date.now() + 2000,
          scopes: ["user:inference"],
          subscriptionType: "max",
        },
      },
      0o600,
    );
    const r = await f.cli(["auth", "import", "claude", "--file", path]);
    expect(r.status, r.stderr).toBe(0);
    const creds = (JSON.parse(readFileSync(path, "utf8")) as { claudeAiOauth: Record<string, string> })
      .claudeAiOauth;
    expect(creds.accessToken).toMatch(/^sk-ant-oat01-kbph_/);
    const messages = (token: string) =>
      call(
        "POST",
        "https://api.anthropic.com/v1/messages",
        {
          authorization: `Bearer ${token}`,
          "anthropic-beta": "oauth-2025-04-20",
          "content-type": "application/json",
        },
        "{}",
      );
    await served(() => messages(creds.accessToken!));
    // keybroker refreshes ahead of expiry, once; Claude Code's own refresh is answered at home.
    await expect.poll(() => fakes.claude.refreshes, { timeout: 10_000 }).toBe(1);
    const refreshed = await call(
      "POST",
      "https://platform.claude.com/v1/oauth/token",
      { "content-type": "application/json" },
      JSON.stringify({
        grant_type: "refresh_token",
        refresh_token: creds.refreshToken,
        client_id: CLIENT_IDS.claude,
      }),
    );
    expect(refreshed.status).toBe(200);
    expect(fakes.claude.refreshes).toBe(1);
    expect((await messages(creds.accessToken!)).status).toBe(200);
    const printed = await f.cli(["auth", "phantom", "claude-oauth", "--for", "claude"]);
    expect(printed.status, printed.stderr).toBe(0);
    const variable = /^CLAUDE_CODE_OAUTH_TOKEN=(\S+)$/m.exec(printed.stdout)![1]!;
    expect((await messages(variable)).status).toBe(200);
  }, 90_000);

  it("gemini: the phantom is swapped at tokeninfo, userinfo and cloudcode-pa; a refresh is answered at home", async () => {
    const { f, fakes, call, write, served } = await setup();
    const t = fakes.gemini.login();
    const path = write(".gemini/oauth_creds.json", { ...t, expiry_date: Date.now() + 3_600_000 }, 0o600);
    const r = await f.cli(["auth", "import", "gemini", "--file", path]);
    expect(r.status, r.stderr).toBe(0);
    const creds = JSON.parse(readFileSync(path, "utf8")) as Record<string, string>;
    expect(creds.access_token).toMatch(/^ya29\.kbph_/);
    await served(() =>
      call(
        "GET",
        `https://oauth2.googleapis.com/tokeninfo?access_token=${encodeURIComponent(creds.access_token!)}`,
        {},
      ),
    );
    // As google-auth-library's getTokenInfo asks (Gemini CLI 0.61): a POST with the token as a bearer.
    const info = await call(
      "POST",
      "https://oauth2.googleapis.com/tokeninfo",
      { authorization: `Bearer ${creds.access_token}`, "content-type": "application/x-www-form-urlencoded" },
      "",
    );
    expect(info.status).toBe(200);
    // Those hosts serve every Google API: a phantom goes nowhere there but the two check paths.
    const drive = await call("GET", "https://www.googleapis.com/drive/v3/files", {
      authorization: `Bearer ${creds.access_token}`,
    });
    expect(drive.status).toBe(403);
    expect(drive.text).toContain("placeholder_host_mismatch");
    expect(
      (
        await call("GET", "https://www.googleapis.com/oauth2/v2/userinfo", {
          authorization: `Bearer ${creds.access_token}`,
        })
      ).status,
    ).toBe(200);
    expect(
      (
        await call(
          "POST",
          "https://cloudcode-pa.googleapis.com/v1internal:generateContent",
          { authorization: `Bearer ${creds.access_token}`, "content-type": "application/json" },
          "{}",
        )
      ).status,
    ).toBe(200);
    const form = new URLSearchParams({
      grant_type: "refresh_token",
      refresh_token: creds.refresh_token!,
      client_id: CLIENT_IDS.gemini,
      client_secret: GEMINI_SECRET,
    });
    const refreshed = await call(
      "POST",
      "https://oauth2.googleapis.com/token",
      { "content-type": "application/x-www-form-urlencoded" },
      form.toString(),
    );
    expect(refreshed.status).toBe(200);
    expect(fakes.gemini.refreshes).toBe(0);
  }, 90_000);
});
