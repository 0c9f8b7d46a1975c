// docs/spec.md §3.10 in a fleet (decision 108): approvals.max_pending bounds what each broker holds, not
// the fleet's shared list. The bodies are in the memory of the broker that holds them, so a
// broker at its bound refuses with 503 approvals_full while another broker of the same fleet
// still holds requests; both are listed fleet-wide and answered from either broker. Two brokers
// on one real redis-server, real TLS, undici through each.
import { readFileSync } from "node:fs";
import { ProxyAgent, request } from "undici";
import { afterAll, beforeAll, expect, it } from "vitest";
import { adminTokenPath } from "../../admin/api.js";
import type { ApprovalView } from "../../state/approvals/store.js";
import { type BrokerProcess, findSecrets, startBroker, tempHome, writeConfig } from "../helpers/broker.js";
import { until } from "../helpers/fleet.js";
import { fleetHomes, type RedisServer, startRedis } from "../helpers/redis.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const PASSWORD = "redis-pw-bounds-7c1e5a9d3b";
const KEY = "sk-fleet-bounds-key-1f2e3d4c5b6a7980";
const HOST = "api.bounded.test";

let redis: RedisServer;
let u: FakeUpstream;
const homes: string[] = [];
const brokers: BrokerProcess[] = [];
const agents: ProxyAgent[] = [];
let placeholder: string;
let upstreamHits = 0;

const adminToken = (i: number) => readFileSync(adminTokenPath(homes[i]!), "utf8").trim();

async function pending(i: number): Promise<ApprovalView[]> {
  const res = await request(`${brokers[i]!.url}/__keybroker/admin/approvals`, {
    headers: { authorization: `Bearer ${adminToken(i)}` },
  });
  expect(res.statusCode).toBe(200);
  return ((await res.body.json()) as { approvals: ApprovalView[] }).approvals;
}

async function deny(i: number, id: string): Promise<void> {
  const res = await request(`${brokers[i]!.url}/__keybroker/admin/approvals/${id}/deny`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminToken(i)}` },
  });
  await res.body.dump();
  expect(res.statusCode).toBe(200);
}

/** A POST through broker `i`: its status and error code. */
async function send(i: number): Promise<{ status: number; code: string | undefined }> {
  const res = await request(`https://${HOST}/v1/hold`, {
    method: "POST",
    dispatcher: agents[i]!,
    headers: { authorization: `Bearer ${placeholder}`, "content-type": "application/json" },
    body: '{"note":"please"}',
  });
  await res.body.dump();
  return { status: res.statusCode, code: res.headers["x-keybroker-error"] as string | undefined };
}

/** Sends through broker `holder`; resolves once broker `viewer` lists it. */
async function hold(holder: number, viewer: number) {
  const before = new Set((await pending(viewer)).map((p) => p.id));
  const done = send(holder);
  const view = await until(
    async () => (await pending(viewer)).find((p) => !before.has(p.id)),
    `broker ${viewer + 1} listing the request held on broker ${holder + 1}`,
  );
  return { id: view.id, done };
}

beforeAll(async () => {
  redis = await startRedis({ password: PASSWORD });
  u = await startUpstream();
  u.routes.set("POST /v1/hold", (_req, res) => {
    upstreamHits++;
    res.writeHead(200, { "content-type": "application/json" });
    res.end('{"ok":true}');
  });
  const config = writeConfig(
    tempHome(),
    `version: 1
state: { url: "${redis.url}", password: env:KB_REDIS_PASSWORD, prefix: "kbbound:" }
upstream_ca: [${JSON.stringify(u.caPath)}]
resolve:
  "${HOST}:443": "127.0.0.1:${u.port}"
catalogue: false
approvals: { timeout: 20s, max_pending: 1 }
providers:
  held:
    hosts: [${HOST}]
    inject: { header: authorization }
    credentials: [HELD_KEY]
    placeholder: { env: HELD_KEY_PLACEHOLDER }
    policy:
      - approve: { method: POST, path: "/v1/hold" }
`,
  );
  const env = { HELD_KEY: KEY, KB_REDIS_PASSWORD: PASSWORD };
  homes.push(...fleetHomes(2));
  brokers.push(...(await Promise.all(homes.map((home) => startBroker({ home, config, env })))));
  for (const b of brokers)
    agents.push(new ProxyAgent({ uri: b.url, requestTls: { ca: readFileSync(b.caPath, "utf8") } }));
  const agent = await request(`${brokers[0]!.url}/__keybroker/admin/agent?client=default`, {
    headers: { authorization: `Bearer ${adminToken(0)}` },
  });
  placeholder = ((await agent.body.json()) as { placeholders: Record<string, string> }).placeholders
    .HELD_KEY_PLACEHOLDER!;
}, 30_000);

afterAll(async () => {
  for (const a of agents) await a.close();
  for (const b of brokers) await b.stop();
  await redis?.stop();
  await u?.close();
  const tokens = homes.map((_, i) => adminToken(i));
  expect(findSecrets([KEY, PASSWORD, ...tokens], homes, undefined, (f) => f.endsWith("admin.token"))).toEqual(
    [],
  );
});

it("max_pending is each broker's own: broker 1 at its bound refuses, broker 2 still holds, both are listed fleet-wide", async () => {
  const first = await hold(0, 1);
  expect(await send(0)).toEqual({ status: 503, code: "approvals_full" });
  // The fleet's list already has one request; broker 2 holds its own all the same.
  const second = await hold(1, 0);
  expect((await pending(0)).map((p) => p.id).sort()).toEqual([first.id, second.id].sort());
  expect(upstreamHits).toBe(0);

  // Answered from the other broker: broker 1 has room again.
  await deny(1, first.id);
  expect(await first.done).toEqual({ status: 403, code: "policy_denied" });
  const third = await hold(0, 1);
  await deny(0, second.id);
  await deny(1, third.id);
  expect(await second.done).toEqual({ status: 403, code: "policy_denied" });
  expect(await third.done).toEqual({ status: 403, code: "policy_denied" });
  expect(upstreamHits).toBe(0);
});
