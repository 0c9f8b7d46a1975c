// docs/spec.md §19 "Many agents, one login" with pools: two ChatGPT accounts signed in through
// keybroker are two logins of codex-oauth; a usage-limit answer to one account's phantom marks
// only that login, and the other account's phantom keeps being served.
import { request } from "undici";
import { expect, it } from "vitest";
import { codexSignIn, startSubscriptionFixture } from "../helpers/subscription-fixture.js";

it("a usage limit marks only the login whose phantom got it", async () => {
  const { f, fake } = await startSubscriptionFixture("codex");
  const agent = f.proxyAgent();
  const signIn = async (account: string) => {
    fake.account = account;
    return (await codexSignIn(agent, fake)).access_token!;
  };
  const work = await signIn("acc-work");
  const spare = await signIn("acc-spare");
  const codex = async (token: string, account: string) => {
    const res = await request("https://chatgpt.com/backend-api/codex/responses", {
      method: "POST",
      dispatcher: agent,
      headers: {
        authorization: `Bearer ${token}`,
        "chatgpt-account-id": account,
        "content-type": "application/json",
      },
      body: "{}",
    });
    const text = await res.body.text();
    for (const t of fake.issued) expect(text).not.toContain(t);
    return res.statusCode;
  };
  expect(await codex(work, "acc-work")).toBe(200);
  expect(await codex(spare, "acc-spare")).toBe(200);
  fake.limitedAccounts.add("acc-work");
  expect(await codex(work, "acc-work")).toBe(429);
  const status = JSON.parse((await f.cli(["status", "--json"])).stdout) as {
    providers: { id: string; credentials: { id: string; state: string }[] }[];
  };
  const creds = status.providers.find((p) => p.id === "codex-oauth")!.credentials;
  expect(creds.find((c) => c.id === "default")?.state).toBe("usage_limit_reached");
  expect(creds.find((c) => c.id !== "default")?.state).toBe("ok");
  // The spare account is untouched, and the marked one is not silently served with another account.
  expect(await codex(spare, "acc-spare")).toBe(200);
  expect(await codex(work, "acc-work")).toBe(429);
  await agent.close();
}, 60_000);
