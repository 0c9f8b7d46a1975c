// Fleet mode over TLS (`rediss://`, docs/spec.md §17): a real redis-server listening for TLS only, its
// certificate made by keybroker's own certs module under a CA of its own. Two brokers that list
// that CA in `upstream_ca` share a mark over it; a third that does not trust it starts anyway,
// serves from memory, and says why it is degraded and what to do.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminTokenPath } from "../../admin/api.js";
import type { StatusReport } from "../../admin/status.js";
import { loadOrCreateCa } from "../../certs/ca.js";
import { LeafMinter } from "../../certs/leaf.js";
import {
  type BrokerProcess,
  cliAsync,
  findSecrets,
  startBroker,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { fleetHomes, type RedisServer, startRedis } from "../helpers/redis.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const KEY_A = "sk-fleet-tls-key-a-5f6a7b8c9d0e1f2a";
const KEY_B = "sk-fleet-tls-key-b-6a7b8c9d0e1f2a3b";

let redis: RedisServer;
let u: FakeUpstream;
const homes: string[] = [];
const brokers: BrokerProcess[] = [];
let untrusted: BrokerProcess;
let untrustedConfig: string;

function rules(upstreamCa: readonly string[]): string {
  return `version: 1
state: { url: "${redis.url}", prefix: "kbtls:" }
upstream_ca: ${JSON.stringify(upstreamCa)}
resolve: { "api.pool.test:443": "127.0.0.1:${u.port}" }
catalogue: false
providers:
  pooled:
    hosts: [api.pool.test]
    inject: { header: authorization }
    credentials: [KEY_A, KEY_B]
    placeholder: { value: "kb-tls-placeholder" }
`;
}

async function status(b: BrokerProcess): Promise<StatusReport> {
  const token = readFileSync(adminTokenPath(b.home), "utf8").trim();
  const res = await request(`${b.url}/__keybroker/admin/status`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return (await res.body.json()) as StatusReport;
}

async function send(b: BrokerProcess): Promise<number> {
  const agent = new ProxyAgent({ uri: b.url, requestTls: { ca: readFileSync(b.caPath, "utf8") } });
  try {
    const res = await request("https://api.pool.test/v1/pool", {
      method: "POST",
      dispatcher: agent,
      headers: { authorization: "Bearer kb-tls-placeholder" },
      body: "{}",
    });
    await res.body.text();
    return res.statusCode;
  } finally {
    await agent.close();
  }
}

beforeAll(async () => {
  // The Redis server's certificate, for 127.0.0.1, from a CA only the fleet's rule file names.
  const dir = tempHome();
  const redisCa = loadOrCreateCa(dir);
  const leaf = new LeafMinter(redisCa).mint("127.0.0.1");
  writeFileSync(join(dir, "redis.pem"), leaf.certPem);
  writeFileSync(join(dir, "redis-key.pem"), leaf.keyPem, { mode: 0o600 });
  redis = await startRedis({
    tls: { cert: join(dir, "redis.pem"), key: join(dir, "redis-key.pem"), ca: redisCa.certPath },
  });
  expect(redis.url).toMatch(/^rediss:\/\//);
  u = await startUpstream();
  u.routes.set("POST /v1/pool", (req, res) => {
    const out = req.headers.authorization === `Bearer ${KEY_A}`;
    res.writeHead(out ? 429 : 200, {
      "content-type": "application/json",
      ...(out ? { "retry-after": "600" } : {}),
    });
    res.end(out ? '{"error":{"type":"rate_limit_error"}}' : '{"ok":true}');
  });
  const config = writeConfig(tempHome(), rules([u.caPath, redisCa.certPath]));
  untrustedConfig = writeConfig(tempHome(), rules([u.caPath]));
  homes.push(...fleetHomes(3));
  const env = { KEY_A, KEY_B };
  const started = await Promise.all([
    startBroker({ home: homes[0]!, config, env }),
    startBroker({ home: homes[1]!, config, env }),
    startBroker({ home: homes[2]!, config: untrustedConfig, env }),
  ]);
  brokers.push(started[0]!, started[1]!);
  untrusted = started[2]!;
}, 60_000);

afterAll(async () => {
  for (const b of [...brokers, untrusted]) await b?.stop();
  await redis?.stop();
  await u?.close();
  expect(findSecrets([KEY_A, KEY_B], homes)).toEqual([]);
});

describe("rediss://", () => {
  it("two brokers share a mark over TLS to Redis", async () => {
    for (const b of brokers)
      expect((await status(b)).state).toMatchObject({ store: "redis", url: redis.url });
    for (const b of brokers) expect((await status(b)).state?.degradedSince).toBeUndefined();
    // Broker 1 sees KEY_A exhausted; broker 2 learns it through Redis and never sends KEY_A.
    expect(await send(brokers[0]!)).toBe(200);
    const deadline = Date.now() + 10_000;
    let seen: string | undefined;
    while (Date.now() < deadline) {
      const s = await status(brokers[1]!);
      seen = s.providers.find((p) => p.id === "pooled")?.credentials.find((c) => c.id === "KEY_A")?.state;
      if (seen === "usage_limit_reached") break;
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(seen).toBe("usage_limit_reached");
    const sentA = u.received.filter((r) => r.headers.authorization === `Bearer ${KEY_A}`).length;
    expect(await send(brokers[1]!)).toBe(200);
    expect(u.received.filter((r) => r.headers.authorization === `Bearer ${KEY_A}`).length).toBe(sentA);
  });

  it("a Redis certificate not trusted: the broker serves from memory and says what to do", async () => {
    const s = await status(untrusted);
    expect(s.state?.degradedSince).toBeDefined();
    expect(s.state?.error).toMatch(
      /the Redis server's TLS certificate is not trusted .*add the CA that signed it to the rule file's upstream_ca/,
    );
    expect(untrusted.stderr()).toMatch(
      /fleet state: Redis at rediss:\/\/.* is unreachable \(the Redis server's TLS certificate is not trusted/,
    );
    // Still serving: its own memory has no mark, so KEY_A is tried (and marked here).
    expect(await send(untrusted)).toBe(200);
    const text = await cliAsync(["status", "--home", untrusted.home, "--config", untrustedConfig]);
    expect(text.stdout).toMatch(/^state: degraded since \S+ \(rediss:\/\/.*not trusted/m);
    expect(untrusted.child.exitCode).toBeNull();
  });
});
