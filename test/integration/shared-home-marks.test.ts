// Two brokers on one home (README: several brokers may share a home; decision 112;
// docs/reliability.md "Fleet and shared-home marks"): two real broker processes, spawned as
// users run them, with two rule files and one home. A mark made by one is seen by the other
// (it skips the credential), a mark made by the other does not reset it in pools.json, an
// earlier deadline never shortens a later one, and a reset made through one clears both.
import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { join } from "node:path";
import { ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminTokenPath } from "../../admin/api.js";
import type { StatusReport } from "../../admin/status.js";
import { type BrokerProcess, findSecrets, startBroker, tempHome, writeConfig } from "../helpers/broker.js";
import { HOSTS } from "../helpers/fixture.js";
import { until } from "../helpers/fleet.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const KEYS = {
  KEY_1: "sk-shared-home-1111111111111111111111",
  KEY_2: "sk-shared-home-2222222222222222222222",
  KEY_3: "sk-shared-home-3333333333333333333333",
};

let u: FakeUpstream;
let home: string;
const brokers: BrokerProcess[] = [];
const agents: ProxyAgent[] = [];
let placeholder: string;
/** The upstream's answer per key: seconds of retry-after for a 429, or absent for 200. */
const retryAfter = new Map<string, number>();
const seen: string[] = [];
/** While set, requests with key 3 wait here for the test to answer them (429, with retry-after). */
let held: ServerResponse[] | undefined;

async function status(i: number): Promise<StatusReport> {
  const token = readFileSync(adminTokenPath(home), "utf8").trim();
  const res = await request(`${brokers[i]!.url}/__keybroker/admin/status`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return (await res.body.json()) as StatusReport;
}
const stateOf = (s: StatusReport, id: string) =>
  s.providers.find((p) => p.id === "openai")?.credentials.find((c) => c.id === id);

async function chat(i: number): Promise<number> {
  const res = await request("https://api.openai.com/v1/chat/completions", {
    method: "POST",
    dispatcher: agents[i]!,
    headers: { authorization: `Bearer ${placeholder}`, "content-type": "application/json" },
    body: "{}",
  });
  await res.body.text();
  return res.statusCode;
}

function onDisk(): Record<string, { state: string; until?: number }> {
  const data = JSON.parse(readFileSync(join(home, "state", "pools.json"), "utf8")) as {
    providers: Record<string, Record<string, { state: string; until?: number }>>;
  };
  return data.providers.openai ?? {};
}

beforeAll(async () => {
  u = await startUpstream();
  u.routes.set("POST /v1/chat/completions", (req: IncomingMessage, res: ServerResponse) => {
    const key = String(req.headers.authorization ?? "").replace(/^Bearer /, "");
    seen.push(key);
    if (held !== undefined && key === KEYS.KEY_3) {
      held.push(res);
      return;
    }
    const after = retryAfter.get(key);
    res.writeHead(after === undefined ? 200 : 429, {
      "content-type": "application/json",
      ...(after === undefined ? {} : { "retry-after": String(after) }),
    });
    res.end(JSON.stringify(after === undefined ? { ok: true } : { error: { type: "rate_limit_error" } }));
  });
  home = tempHome();
  const resolve = HOSTS.map((h) => `  "${h}:443": "127.0.0.1:${u.port}"`).join("\n");
  const rules = `version: 1
upstream_ca: [${JSON.stringify(u.caPath)}]
resolve:
${resolve}
providers:
  openai:
    credentials: [KEY_1, KEY_2, KEY_3]
`;
  // Two rule files (as two projects would have), one home.
  const configs = [writeConfig(tempHome(), rules), writeConfig(tempHome(), rules)];
  for (const config of configs) brokers.push(await startBroker({ home, config, env: KEYS }));
  for (const b of brokers)
    agents.push(new ProxyAgent({ uri: b.url, requestTls: { ca: readFileSync(b.caPath, "utf8") } }));
  const token = readFileSync(adminTokenPath(home), "utf8").trim();
  const res = await request(`${brokers[0]!.url}/__keybroker/admin/agent?client=default`, {
    headers: { authorization: `Bearer ${token}` },
  });
  placeholder = ((await res.body.json()) as { placeholders: Record<string, string> }).placeholders
    .OPENAI_API_KEY!;
}, 60_000);

afterAll(async () => {
  for (const a of agents) await a.close();
  for (const b of brokers) await b.stop();
  await u?.close();
  expect(findSecrets(Object.values(KEYS), [home])).toEqual([]);
});

describe("two brokers on one home", () => {
  it("B sees A's mark and skips the credential; B's own mark does not reset A's in pools.json", async () => {
    // A: key 1 is out of quota for 10 minutes; the request moves to key 2.
    retryAfter.set(KEYS.KEY_1, 600);
    const before = Date.now();
    expect(await chat(0)).toBe(200);
    expect(seen).toEqual([KEYS.KEY_1, KEYS.KEY_2]);
    const deadline = onDisk().KEY_1!.until!;
    expect(deadline).toBeGreaterThanOrEqual(before + 600_000 - 1000);
    // B sees it without making a mark of its own, and skips key 1.
    await until(
      async () => stateOf(await status(1), "KEY_1")?.state === "usage_limit_reached",
      "B to see A's mark",
    );
    seen.length = 0;
    expect(await chat(1)).toBe(200);
    expect(seen).toEqual([KEYS.KEY_2]);
    // B: key 2 is out of quota for 5 minutes; the request moves to key 3.
    retryAfter.set(KEYS.KEY_2, 300);
    seen.length = 0;
    expect(await chat(1)).toBe(200);
    expect(seen).toEqual([KEYS.KEY_2, KEYS.KEY_3]);
    // Both marks are on disk: B's write kept A's mark and its deadline.
    const disk = onDisk();
    expect(disk.KEY_1?.state).toBe("usage_limit_reached");
    expect(disk.KEY_1?.until).toBe(deadline);
    expect(disk.KEY_2?.state).toBe("usage_limit_reached");
    // And A sees B's mark.
    await until(
      async () => stateOf(await status(0), "KEY_2")?.state === "usage_limit_reached",
      "A to see B's mark",
    );
  });

  it("an earlier deadline made by one broker never shortens the later one the other made", async () => {
    // Both brokers send a request on key 3 before either has a mark for it (keys 1 and 2 are
    // marked); the upstream answers A's with 429 for 15 minutes, then B's with 429 for 30 s.
    held = [];
    const pending = held;
    const a = chat(0);
    await until(async () => pending.length === 1, "A's request upstream");
    const b = chat(1);
    await until(async () => pending.length === 2, "B's request upstream");
    const answer = (res: ServerResponse, after: number) => {
      res.writeHead(429, { "content-type": "application/json", "retry-after": String(after) });
      res.end(JSON.stringify({ error: { type: "rate_limit_error" } }));
    };
    const before = Date.now();
    answer(pending[0]!, 900);
    expect(await a).toBe(429);
    const later = onDisk().KEY_3!.until!;
    expect(later).toBeGreaterThanOrEqual(before + 900_000 - 1000);
    answer(pending[1]!, 30);
    expect(await b).toBe(429);
    held = undefined;
    expect(onDisk().KEY_3!.until).toBe(later);
    for (const i of [0, 1])
      await until(
        async () => Date.parse(stateOf(await status(i), "KEY_3")?.until ?? "0") === later,
        `broker ${i + 1} to hold the later deadline`,
      );
  });

  it("a reset through one broker clears the marks in both", async () => {
    for (const k of Object.values(KEYS)) retryAfter.delete(k);
    // Before: both hold marks the other made (key 1 by A, key 2 by B).
    for (const i of [0, 1])
      for (const id of ["KEY_1", "KEY_2"])
        await until(
          async () => stateOf(await status(i), id)?.state === "usage_limit_reached",
          `broker ${i + 1} to hold ${id}`,
        );
    const token = readFileSync(adminTokenPath(home), "utf8").trim();
    const res = await request(`${brokers[0]!.url}/__keybroker/admin/reset`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ provider: "openai" }),
    });
    expect(res.statusCode).toBe(200);
    await res.body.text();
    await until(async () => stateOf(await status(1), "KEY_1")?.state === "ok", "B to see the reset");
    // B's own mark went too, and B's next write does not bring any of them back.
    expect(stateOf(await status(1), "KEY_2")?.state).toBe("ok");
    seen.length = 0;
    expect(await chat(1)).toBe(200);
    expect(seen).toEqual([KEYS.KEY_1]);
    expect(onDisk().KEY_1?.state).toBe("ok");
    // A mark made after the reset stands; none made before it comes back with B's write.
    retryAfter.set(KEYS.KEY_1, 60);
    seen.length = 0;
    expect(await chat(1)).toBe(200);
    expect(seen).toEqual([KEYS.KEY_1, KEYS.KEY_2]);
    const disk = onDisk();
    expect(disk.KEY_1?.state).toBe("usage_limit_reached");
    expect(disk.KEY_2?.state).toBe("ok");
    expect(disk.KEY_3?.state).toBe("ok");
  });
});
