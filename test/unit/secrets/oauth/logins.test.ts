import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { OAuthLogins } from "../../../../secrets/oauth/logins.js";
import { FileTokenStore } from "../../../../state/tokens/home.js";
import type { StoredLogin } from "../../../../state/tokens/login.js";

const homes: string[] = [];
afterEach(() => {
  for (const h of homes.splice(0)) rmSync(h, { recursive: true, force: true });
});

function login(id: string): StoredLogin {
  const now = Date.now();
  return {
    provider: "codex-oauth",
    id,
    accessToken: `access-${id}-5d1e9b`,
    refreshToken: `refresh-${id}-8c2f4a`,
    expiresAt: now + 3_600_000,
    issuedAt: now,
    createdAt: now,
    generation: 1,
    state: "ok",
  };
}

describe("OAuthLogins.members", () => {
  it("lists logins in label order, whatever order they arrived in while the broker ran", async () => {
    const home = mkdtempSync(join(tmpdir(), "kb-logins-"));
    homes.push(home);
    const logins = await new OAuthLogins(new FileTokenStore(home)).open();
    // The order two watch events' reads can finish in: the later label first.
    logins.adopt(login("b-second"));
    logins.adopt(login("a-first"));
    logins.adopt(login("c-third"));
    expect(logins.members("codex-oauth").map((e) => e.login.id)).toEqual(["a-first", "b-second", "c-third"]);
    // A refreshed login keeps its place.
    logins.adopt({ ...login("a-first"), accessToken: "access-a-refreshed-77e1", generation: 2 });
    expect(logins.members("codex-oauth").map((e) => e.login.id)).toEqual(["a-first", "b-second", "c-third"]);
    logins.close();
  });
});
