// A broker nobody scrapes does not load prom-client (decision 171): the Prometheus registry, and
// the module behind it, come with the first GET /metrics. Requests are
// counted all along, so the first scrape still shows them.
import { createRequire } from "node:module";
import { sep } from "node:path";
import { type ProxyAgent, request } from "undici";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";

const require = createRequire(import.meta.url);
/** Whether this process has loaded prom-client (a CommonJS package: it is in require's cache). */
const promClientLoaded = () => Object.keys(require.cache).some((k) => k.includes(`${sep}prom-client${sep}`));

let f: InProcessFixture;
let agent: ProxyAgent;

beforeAll(async () => {
  f = await startInProcessFixture();
  agent = f.proxyAgent();
});

afterAll(async () => {
  await agent?.close();
  await f?.close();
});

it("loads prom-client on the first scrape, not at start or per request, and the scrape counts the earlier requests", async () => {
  const placeholder = await f.placeholder("openai");
  for (let i = 0; i < 3; i++) {
    const res = await request("https://api.openai.com/v1/chat/completions", {
      method: "POST",
      dispatcher: agent,
      headers: { authorization: `Bearer ${placeholder}`, "content-type": "application/json" },
      body: "{}",
    });
    await res.body.text();
    expect(res.statusCode).toBe(200);
  }
  expect(promClientLoaded()).toBe(false);

  const res = await request(`${f.broker.url}/metrics`);
  const text = await res.body.text();
  expect(res.statusCode).toBe(200);
  expect(promClientLoaded()).toBe(true);
  const injected = text
    .split("\n")
    .find((l) => l.startsWith("keybroker_requests_total{") && l.includes('provider="openai"'));
  expect(injected).toMatch(/ 3$/);
  expect(f.leaks()).toEqual([]);
});
