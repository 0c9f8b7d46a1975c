// An in-process broker with one subscription vendor's fake (test/helpers/fake-subscriptions.ts)
// behind the catalogue's rules; when the test ends it is closed and scanned for every real token
// the fake issued.
import { type Dispatcher, request } from "undici";
import { expect, onTestFinished } from "vitest";
import { CLIENT_IDS, type FakeVendor, installVendor, subscriptionRules } from "./fake-subscriptions.js";
import { type InProcessFixture, startInProcessFixture } from "./in-process.js";
import { oauthLeaks } from "./oauth-leaks.js";
import type { FakeUpstream } from "./upstream.js";

export async function startSubscriptionFixture(
  vendor: Parameters<typeof installVendor>[1],
  edit: (rules: string, u: FakeUpstream) => string = (rules) => rules,
): Promise<{ f: InProcessFixture; fake: FakeVendor }> {
  let fake!: FakeVendor;
  const f = await startInProcessFixture({
    rules: (u) => {
      fake = installVendor(u, vendor);
      return edit(subscriptionRules(u), u);
    },
  });
  onTestFinished(async () => {
    await f.close();
    expect(oauthLeaks(f, fake.issued)).toEqual([]);
  });
  return { f, fake };
}

/**
 * Codex's sign-in through the broker (`dispatcher`): the code exchange at auth.openai.com, with a
 * code the fake issued. The answer, as Codex gets it (phantoms only).
 */
export async function codexSignIn(dispatcher: Dispatcher, fake: FakeVendor): Promise<Record<string, string>> {
  const res = await request("https://auth.openai.com/oauth/token", {
    method: "POST",
    dispatcher,
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code: fake.code(),
      client_id: CLIENT_IDS.codex,
    }).toString(),
  });
  expect(res.statusCode).toBe(200);
  return JSON.parse(await res.body.text()) as Record<string, string>;
}
