import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { ProviderRule } from "../../../../rules/types.js";
import { OAuthLogins } from "../../../../secrets/oauth/logins.js";
import { Refresher } from "../../../../secrets/oauth/refresher.js";
import { FileTokenStore } from "../../../../state/tokens/home.js";

const homes: string[] = [];
afterEach(() => {
  for (const h of homes.splice(0)) rmSync(h, { recursive: true, force: true });
});

describe("Refresher: an MCP login it has no binding for", () => {
  it("is not refreshed, and the log says once what to run", async () => {
    const home = mkdtempSync(join(tmpdir(), "kb-refresher-"));
    homes.push(home);
    const store = new FileTokenStore(home);
    const now = Date.now();
    const expired = "expired-access-token-3f9a1c";
    await store.put({
      provider: "notes",
      id: "work",
      accessToken: expired,
      refreshToken: "refresh-token-never-sent-7b2e",
      expiresAt: now - 1_000,
      issuedAt: now - 3_600_000,
      createdAt: now - 3_600_000,
      generation: 1,
      state: "ok",
    });
    const logins = await new OAuthLogins(store).open();
    const warnings: string[] = [];
    const refresher = new Refresher({
      logins,
      rule: () =>
        ({
          id: "notes",
          kind: "mcp",
          mcp: { url: "https://mcp.example.test/mcp" },
        }) as unknown as ProviderRule,
      client: () => undefined,
      loginClient: async () => undefined,
      onEvent: () => {},
      warn: (message) => warnings.push(message),
    });
    for (let i = 0; i < 3; i++) {
      const entry = await refresher.refresh("notes", "work", expired);
      expect(entry?.login.accessToken).toBe(expired);
    }
    expect(warnings).toEqual([
      "the MCP login notes/work cannot be refreshed: how it was made (its authorization server and client) is not in the state store; run keybroker auth add notes --label work",
    ]);
    refresher.close();
    logins.close();
  });
});
