// An in-process broker with one subscription vendor's fake (test/helpers/fake-subscriptions.ts)
// behind the catalogue's rules; when the test ends it is closed and scanned for every real token
// the fake issued.
import { expect, onTestFinished } from "vitest";
import { type FakeVendor, installVendor, subscriptionRules } from "./fake-subscriptions.js";
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
