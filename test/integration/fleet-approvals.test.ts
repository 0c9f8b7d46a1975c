// Pending approvals shared on Redis (docs/spec.md §16, §17): two brokers, each with its own home (the CA
// and home key copied from the first), on one real redis-server. A request held by one broker
// is listed and answered with the real `keybroker approvals|approve|deny` commands against the
// other; of two brokers approving at once exactly one wins; `approve --for` on one lets the
// next matching request on the other through unheld; Redis holds no secret; a broker whose
// Redis is down still holds and answers its own requests, and shares them once Redis is back.

import { once } from "node:events";
import { existsSync, readFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminTokenPath } from "../../admin/api.js";
import { Approvals } from "../../proxy/approvals.js";
import { RedisApprovalStore } from "../../state/approvals/redis.js";
import type { ApprovalChange, ApprovalRequest, ApprovalView } from "../../state/approvals/store.js";
import { TokenCipher } from "../../state/redis/cipher.js";
import type { RedisState } from "../../state/redis/state.js";
import {
  type BrokerProcess,
  cliAsync,
  findSecrets,
  startBroker,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { openFleetState, until } from "../helpers/fleet.js";
import { fleetHomes, type RedisServer, redisLeaks, startRedis } from "../helpers/redis.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const PASSWORD = "redis-pw-approvals-4b8d2f6a1c";
const KEY = "sk-fleet-approve-key-9a8b7c6d5e4f3a2b1c0d";
const PREFIX = "kbappr:";
const HOST = "api.held.test";

let redis: RedisServer;
let raw: Redis;
let u: FakeUpstream;
const homes: string[] = [];
const brokers: BrokerProcess[] = [];
const agents: ProxyAgent[] = [];
let placeholder: string;
/** What the upstream got, by path. */
const hits = new Map<string, number>();

const adminToken = (i: number) => readFileSync(adminTokenPath(homes[i]!), "utf8").trim();

/** The pending list of broker `i`'s admin API (what its admin page shows). */
async function pending(i: number): Promise<ApprovalView[]> {
  const res = await request(`${brokers[i]!.url}/__keybroker/admin/approvals`, {
    headers: { authorization: `Bearer ${adminToken(i)}` },
  });
  expect(res.statusCode).toBe(200);
  return ((await res.body.json()) as { approvals: ApprovalView[] }).approvals;
}

/** Broker `i`'s security audit chain, where each approval step is written. */
function audited(i: number): string {
  const file = join(homes[i]!, "audit", "security.jsonl");
  return existsSync(file) ? readFileSync(file, "utf8") : "";
}

/** Approves or denies through broker `i`'s admin API (as its admin page does): the status. */
async function answer(i: number, id: string, verb: "approve" | "deny"): Promise<number> {
  const res = await request(`${brokers[i]!.url}/__keybroker/admin/approvals/${id}/${verb}`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminToken(i)}` },
  });
  await res.body.dump();
  return res.statusCode;
}

/** `keybroker <args> --home <broker i's home>`. */
const kb = (i: number, ...args: string[]) => cliAsync([...args, "--home", homes[i]!]);

interface Sent {
  readonly status: number;
  readonly code: string | undefined;
  readonly text: string;
}

/** A POST through broker `i`, its body holding the real key (the preview must mask it). */
function send(i: number, path: string, signal?: AbortSignal): Promise<Sent> {
  return request(`https://${HOST}${path}`, {
    method: "POST",
    ...(signal === undefined ? {} : { signal }),
    dispatcher: agents[i]!,
    headers: { authorization: `Bearer ${placeholder}`, "content-type": "application/json" },
    body: JSON.stringify({ note: "please", leaked: KEY }),
  }).then(async (res) => ({
    status: res.statusCode,
    code: res.headers["x-keybroker-error"] as string | undefined,
    text: await res.body.text(),
  }));
}

/** Sends through broker `holder`; resolves once broker `viewer` lists it, with its id. */
async function hold(holder: number, path: string, viewer: number, signal?: AbortSignal) {
  const before = new Set((await pending(viewer)).map((p) => p.id));
  const done = send(holder, path, signal);
  const view = await until(
    async () => (await pending(viewer)).find((p) => p.path === path && !before.has(p.id)),
    `broker ${viewer + 1} listing the request held on broker ${holder + 1}`,
  );
  return { view, done };
}

beforeAll(async () => {
  redis = await startRedis({ password: PASSWORD });
  raw = redis.client();
  u = await startUpstream();
  for (const path of ["/v1/hold", "/v1/race", "/v1/grant", "/v1/slow", "/v1/down"]) {
    u.routes.set(`POST ${path}`, (_req, res) => {
      hits.set(path, (hits.get(path) ?? 0) + 1);
      res.writeHead(200, { "content-type": "application/json" });
      res.end('{"ok":true}');
    });
  }
  const config = writeConfig(
    tempHome(),
    `version: 1
state: { url: "${redis.url}", password: env:KB_REDIS_PASSWORD, prefix: "${PREFIX}" }
upstream_ca: [${JSON.stringify(u.caPath)}]
resolve:
  "${HOST}:443": "127.0.0.1:${u.port}"
catalogue: false
approvals: { timeout: 20s }
providers:
  held:
    hosts: [${HOST}]
    inject: { header: authorization }
    credentials: [HELD_KEY]
    placeholder: { env: HELD_KEY_PLACEHOLDER }
    policy:
      - approve: { method: POST, path: "/v1/hold" }
      - approve: { method: POST, path: "/v1/race" }
      - approve: { method: POST, path: "/v1/grant" }
      - approve: { method: POST, path: "/v1/slow", timeout: 1s }
      - approve: { method: POST, path: "/v1/down", timeout: 12s }
`,
  );
  const env = { HELD_KEY: KEY, KB_REDIS_PASSWORD: PASSWORD };
  // As README "Running a fleet" says: the second broker gets a copy of the first's CA and key.
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
  raw?.disconnect();
  await redis?.stop();
  await u?.close();
  // Neither the key, the Redis password nor an admin token anywhere a broker or command wrote.
  const tokens = homes.map((_, i) => adminToken(i));
  expect(findSecrets([KEY, PASSWORD, ...tokens], homes, undefined, (f) => f.endsWith("admin.token"))).toEqual(
    [],
  );
});

/** The home key of the in-process fleet below. */
const UNIT_KEY = Buffer.alloc(32, 7);

/** A fleet state in this process (its own prefix: the brokers above never see it). */
async function openState(): Promise<RedisState> {
  return openFleetState(redis.url, PASSWORD, "kbunit:", homes[0]!, () => UNIT_KEY);
}

/** An approval message as a broker of the in-process fleet sends it, sealed with its key. */
function sealedMessage(m: object, at = Date.now()): string {
  const sealed = new TokenCipher(UNIT_KEY).seal(JSON.stringify({ ...m, at }), "kbunit:events\0approval");
  return JSON.stringify({ t: "approval", m: sealed, from: "someone" });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const REQUEST: ApprovalRequest = {
  client: "default",
  provider: "held",
  method: "POST",
  host: HOST,
  path: "/v1/x",
  rule: "3f1c0a9b7d2e4c58",
};

describe("the approval store on Redis, in process", () => {
  const states: RedisState[] = [];
  const fleet: Approvals[] = [];
  const changes: ApprovalChange[][] = [];
  beforeAll(async () => {
    for (let i = 0; i < 2; i++) {
      const state = await openState();
      const approvals = new Approvals({ onEvent: () => {}, store: state.approvals });
      const seen: ApprovalChange[] = [];
      approvals.onChange((c) => seen.push(c));
      states.push(state);
      fleet.push(approvals);
      changes.push(seen);
    }
  });
  afterAll(async () => {
    for (const a of fleet) a.close();
    for (const s of states) await s.close();
  });

  /**
   * Holds a request on A; resolves once B's live view was told. A new request has an id B has
   * not heard of: another broker's request that joins the list late under an id already seen
   * (one that clashed, shared when the slot is free again) is not it.
   */
  async function holdOnA() {
    const before = changes[1]!.length;
    const known = new Set(changes[1]!.map((c) => c.id));
    const answer = fleet[0]!.hold(REQUEST, "", 20_000, new AbortController().signal);
    const change = await until(
      async () => changes[1]!.slice(before).find((c) => c.type === "held" && !known.has(c.id)),
      "B told",
    );
    return { id: change.id, answer };
  }

  it("every broker's live view hears of a request held and answered elsewhere", async () => {
    const { id, answer } = await holdOnA();
    expect((await fleet[1]!.list()).map((v) => v.id)).toEqual([id]);
    expect(await fleet[1]!.deny(id, "admin token")).toMatchObject({ id });
    expect(await answer).toMatchObject({ outcome: "denied", by: "admin token" });
    // B answered it: its view changes as it does; A's, the holder's, as its request ends.
    expect(changes[1]!.filter((c) => c.id === id).map((c) => c.type)).toEqual(["held", "answered"]);
    expect(changes[0]!.filter((c) => c.id === id).map((c) => c.type)).toEqual(["held", "answered"]);
    expect(await fleet[0]!.list()).toEqual([]);
  });

  it("a holder that lost the take learns the winner's answer; an answer that never comes is a timeout", async () => {
    const won = await holdOnA();
    // B takes it first (as the atomic step of an approve); A's own approve then finds nothing.
    const held = await states[1]!.approvals.take(won.id);
    expect(held?.id).toBe(won.id);
    expect(await fleet[0]!.approve(won.id, "client a")).toBeUndefined();
    await states[1]!.approvals.publish({ held: held!, outcome: "approved", by: "client b" });
    expect(await won.answer).toMatchObject({ outcome: "approved", by: "client b" });
    // Taken, and the taker died before it answered: the holder refuses it (never lets it through).
    const lost = await holdOnA();
    expect(await states[1]!.approvals.take(lost.id)).toBeDefined();
    expect(await fleet[0]!.approve(lost.id, "client a")).toBeUndefined();
    expect(await lost.answer).toMatchObject({ outcome: "approval_timeout" });
  });

  it("--for grants reach every broker's copy, and a broker that connects later loads them", async () => {
    const { id, answer } = await holdOnA();
    await fleet[1]!.approve(id, "admin token", 60_000);
    expect((await answer).outcome).toBe("approved");
    // The grant message came before the answer on the one channel: A's copy has it.
    expect(await fleet[0]!.covered(REQUEST)).toBe(true);
    expect(await fleet[0]!.covered({ ...REQUEST, rule: "9a8b7c6d5e4f3a2b" })).toBe(false);
    const late = await openState();
    try {
      expect(
        await late.approvals.grantedUntil(["default", "held", REQUEST.rule].join("\0"), Date.now()),
      ).toBeGreaterThan(Date.now());
    } finally {
      await late.close();
    }
  });

  it("requests ended while Redis was unreachable leave the fleet's list, those held meanwhile join it, when it answers again", async () => {
    const client = new Redis(redis.url, {
      password: PASSWORD,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      lazyConnect: true,
    });
    client.on("error", () => {});
    await client.connect();
    const errors: Error[] = [];
    const store = new RedisApprovalStore(client, new TokenCipher(UNIT_KEY), {
      prefix: "kbalone:",
      channel: "kbalone:events",
      self: "alone",
      onError: (err) => errors.push(err),
    });
    const approvals = new Approvals({ onEvent: () => {}, store });
    const keys = () => raw.keys("kbalone:approval:*");
    try {
      const hangUp = new AbortController();
      const first = approvals.hold(REQUEST, "", 20_000, hangUp.signal);
      const [key] = await until(
        async () => ((await keys()).length === 1 ? keys() : undefined),
        "the request in Redis",
      );
      client.disconnect();
      await once(client, "end");
      hangUp.abort();
      expect((await first).outcome).toBe("withdrawn");
      expect(errors.length).toBeGreaterThan(0);
      expect(await raw.exists(key!)).toBe(1);
      const second = approvals.hold(REQUEST, "", 20_000, new AbortController().signal);
      const [pendingHere] = await until(async () => {
        const list = await approvals.list();
        return list.length === 1 ? list : undefined;
      }, "the second held from memory");
      await client.connect();
      await store.resync(false);
      expect(await raw.exists(key!)).toBe(0);
      expect(await keys()).toEqual([`kbalone:approval:${pendingHere!.id}`]);
      await approvals.deny(pendingHere!.id, "admin token");
      expect((await second).outcome).toBe("denied");
    } finally {
      approvals.close();
      client.disconnect();
    }
  });

  it("a Redis writer without the home key cannot answer, grant, or change a request; stale or mismatched sealed messages are dropped", async () => {
    const { id, answer } = await holdOnA();
    const key = `kbunit:approval:${id}`;
    const stored = (await raw.get(key))!;
    // Sealed: nothing of the request readable in Redis.
    expect(stored).not.toContain(REQUEST.path);
    expect(stored).not.toContain('"client"');
    const forge = (m: object) =>
      raw.publish("kbunit:events", JSON.stringify({ t: "approval", m: JSON.stringify(m) }));
    // A rule no earlier test granted.
    const ungranted = { ...REQUEST, rule: "0123456789abcdef" };
    const grant = ["default", "held", ungranted.rule].join("\0");
    const heldNow = { ...REQUEST, id, heldAt: Date.now(), expiresAt: Date.now() + 20_000, preview: "" };
    await forge({ k: "answer", a: { held: { id }, outcome: "approved", by: "nobody" } });
    await forge({ k: "grant", g: grant, u: Date.now() + 864e5 });
    await raw.hset("kbunit:approval-grants", grant, String(Date.now() + 864e5));
    // Sealed with the fleet's key, but a minute old (a replay), or for another request that drew the id.
    await raw.publish(
      "kbunit:events",
      sealedMessage({ k: "grant", g: grant, u: Date.now() + 864e5 }, Date.now() - 120_000),
    );
    await raw.publish(
      "kbunit:events",
      sealedMessage({ k: "answer", a: { held: { ...heldNow, path: "/v1/other" }, outcome: "approved" } }),
    );
    // Another broker's view of it, rewritten: no broker lists what does not open.
    await raw.set(key, JSON.stringify({ ...heldNow, path: "/v1/harmless", expiresAt: 9e15 }), "KEEPTTL");
    expect(await fleet[1]!.list()).toEqual([]);
    await raw.set(key, stored, "KEEPTTL");
    expect((await fleet[1]!.list()).map((v) => [v.id, v.path])).toEqual([[id, REQUEST.path]]);
    // The real answer comes after all of the above on the one channel: it is the one that counts.
    await fleet[1]!.deny(id, "admin token");
    expect(await answer).toMatchObject({ outcome: "denied", by: "admin token" });
    expect(await fleet[0]!.covered(ungranted)).toBe(false);
    const late = await openState();
    try {
      expect(await late.approvals.grantedUntil(grant, Date.now())).toBeUndefined();
    } finally {
      await late.close();
    }
    await raw.hdel("kbunit:approval-grants", grant);

    // The pending key deleted and an answer planted: the holder's own take loses, its chase finds
    // only a forged (then a malformed) answer, and the request times out instead of passing.
    const chased = await holdOnA();
    await raw.del(`kbunit:approval:${chased.id}`);
    await raw.set(
      `kbunit:approval-answer:${chased.id}`,
      JSON.stringify({ held: { ...heldNow, id: chased.id }, outcome: "approved" }),
    );
    expect(await fleet[0]!.deny(chased.id, "admin token")).toBeUndefined();
    await raw.set(`kbunit:approval-answer:${chased.id}`, "{not json");
    expect(await chased.answer).toMatchObject({ outcome: "approval_timeout" });
  });

  it("malformed messages and values neither crash a broker nor mark it degraded: bad entries are skipped one by one", async () => {
    const { id, answer } = await holdOnA();
    for (const text of [
      "null",
      "7",
      JSON.stringify({ t: "approval", m: "null" }),
      JSON.stringify({ t: "approval", m: JSON.stringify({ k: "answer", a: { held: null } }) }),
      JSON.stringify({ t: "approval", m: { k: "held" } }),
      sealedMessage({ k: "answer", a: { held: null } }),
      JSON.stringify({ t: "mark", f: "x", m: "{oops" }),
      JSON.stringify({ t: "mark", f: "held\0KEY", m: "null" }),
    ])
      await raw.publish("kbunit:events", text);
    // Pending values that do not open, or open to the wrong shape (sealed as a broker would).
    const cipher = new TokenCipher(UNIT_KEY);
    const bad = { ...REQUEST, id: "deadbeef", heldAt: "zz", expiresAt: 9e15, preview: "" };
    await raw.set(
      "kbunit:approval:deadbeef",
      `${9e15}:${cipher.seal(JSON.stringify(bad), `kbunit:approval:deadbeef\0${9e15}`)}`,
      "PX",
      20_000,
    );
    await raw.set("kbunit:approval:deadbee0", "{oops", "PX", 20_000);
    await raw.zadd("kbunit:approvals", "1", "deadbeef", "2", "deadbee0");
    for (const a of fleet) expect((await a.list()).map((v) => v.id)).toEqual([id]);
    expect(await states[1]!.approvals.take("deadbeef")).toBeUndefined();
    for (const s of states) expect(s.health()).not.toHaveProperty("degradedSince");
    await fleet[1]!.approve(id, "admin token");
    expect(await answer).toMatchObject({ outcome: "approved" });
    await raw.del("kbunit:approval:deadbee0");
  });

  it("two brokers that draw the same id: the second keeps its request to itself, and one answer ends only the first", async () => {
    const { id, answer } = await holdOnA();
    const b = await openState();
    try {
      const got: string[] = [];
      const told: string[] = [];
      b.approvals.subscribe((a) => got.push(`${a.held.id} ${a.outcome}`));
      b.approvals.watch((c) => told.push(c.id));
      const now = Date.now();
      const other = { ...REQUEST, method: "DELETE", id, heldAt: now, expiresAt: now + 20_000, preview: "" };
      await b.approvals.add(other);
      // Commands on one connection run in order: its add has been answered when this list is.
      expect((await b.approvals.list()).map((h) => h.method)).toEqual(["DELETE"]);
      expect((await fleet[1]!.list()).map((v) => [v.id, v.method])).toEqual([[id, "POST"]]);
      await fleet[1]!.approve(id, "admin token");
      expect(await answer).toMatchObject({ outcome: "approved" });
      // The answer's message reached b before this next request's did.
      const next = await holdOnA();
      await until(async () => told.includes(next.id), "b told of the next request").catch(
        async (err: Error) => {
          // Seen under a loaded machine before holdOnA skipped ids already heard of (b's own
          // request, shared by a late resync once A's was answered, was taken for the next one):
          // what b and the server knew, should it come back.
          const numsub = await raw.pubsub("NUMSUB", "kbunit:events");
          const seen = {
            told,
            got,
            next: next.id,
            id,
            health: b.health(),
            numsub,
            b1: changes[1]!.slice(-4),
          };
          throw new Error(`${err.message}: ${JSON.stringify(seen)}`);
        },
      );
      expect(got).toEqual([]);
      expect((await b.approvals.list()).find((h) => h.id === id)?.method).toBe("DELETE");
      expect(await b.approvals.take(id)).toEqual(other);
      await fleet[1]!.deny(next.id, "admin token");
      await next.answer;
    } finally {
      await b.close();
    }
  });

  it("approve --for on the holder while Redis stalls: the request passes without waiting for the grant's write", async () => {
    const client = new Redis(redis.url, { password: PASSWORD, maxRetriesPerRequest: 0, lazyConnect: true });
    client.on("error", () => {});
    await client.connect();
    const store = new RedisApprovalStore(client, new TokenCipher(UNIT_KEY), {
      prefix: "kbstall:",
      channel: "kbstall:events",
      self: "stall",
      onError: () => {},
    });
    const approvals = new Approvals({ onEvent: () => {}, store });
    const answer = approvals.hold(REQUEST, "", 20_000, new AbortController().signal);
    await until(async () => (await raw.zcard("kbstall:approvals")) === 1, "the request in Redis");
    const [id] = await raw.zrange("kbstall:approvals", "0", "-1");
    process.kill(redis.pid!, "SIGSTOP");
    try {
      // The take waits its second for Redis, then the holder decides alone; no command timeout
      // on this connection: an awaited grant write would hold the answer until Redis resumes.
      const approving = approvals.approve(id!, "admin token", 60_000);
      const outcome = await Promise.race([answer, sleep(8_000).then(() => "still waiting")]);
      expect(outcome).toMatchObject({ outcome: "approved" });
      expect(await approvals.covered(REQUEST)).toBe(true);
      void approving;
    } finally {
      process.kill(redis.pid!, "SIGCONT");
    }
    const grant = ["default", "held", REQUEST.rule].join("\0");
    const value = await until(
      async () => (await raw.hget("kbstall:approval-grants", grant)) ?? undefined,
      "the grant in Redis",
    );
    expect(value).toMatch(/^\d+:/);
    approvals.close();
    client.disconnect();
  });

  it("a broker that stops takes what it held off the fleet's list", async () => {
    const state = await openState();
    const approvals = new Approvals({ onEvent: () => {}, store: state.approvals });
    const answer = approvals.hold(REQUEST, "", 20_000, new AbortController().signal);
    const { id } = await until(async () => (await fleet[1]!.list())[0], "B listing it");
    approvals.close();
    await state.close();
    expect(await raw.exists(`kbunit:approval:${id}`)).toBe(0);
    expect(await fleet[1]!.list()).toEqual([]);
    void answer; // never answered: its broker stopped
  });
});

describe("approvals shared by two brokers on one Redis", () => {
  it("a request held on broker 1 is listed by `approvals --json` on broker 2 and approved there: the client gets the upstream's 200", async () => {
    const { view, done } = await hold(0, "/v1/hold", 1);
    const listed = await kb(1, "approvals", "--json");
    expect(listed.status, listed.stderr).toBe(0);
    const list = JSON.parse(listed.stdout) as ApprovalView[];
    expect(list.find((a) => a.id === view.id)).toMatchObject({
      client: "default",
      provider: "held",
      method: "POST",
      host: HOST,
      path: "/v1/hold",
    });
    expect(view.seconds_left).toBeGreaterThan(0);
    expect(view.preview).toContain("please");
    expect(view.preview).not.toContain(KEY);
    expect(hits.get("/v1/hold")).toBeUndefined();

    // The held request is in Redis, and nothing there is a secret: not the key (the preview
    // masked it), the placeholder, the Redis password nor an admin token.
    // Sealed with the fleet's key: a Redis writer can neither read nor rewrite it.
    expect(await raw.get(`${PREFIX}approval:${view.id}`)).toMatch(/^\d+:[A-Za-z0-9+/=]+$/);
    expect(await raw.zrange(`${PREFIX}approvals`, "0", "-1")).toContain(view.id);
    const secrets = [KEY, placeholder, PASSWORD, adminToken(0), adminToken(1)];
    expect(await redisLeaks(raw, secrets)).toEqual([]);

    const approve = await kb(1, "approve", view.id);
    expect(approve.status, approve.stderr).toBe(0);
    expect(approve.stdout).toContain(`approved ${view.id}`);
    const r = await done;
    expect(r.status, r.text).toBe(200);
    expect(r.text).toBe('{"ok":true}');
    expect(hits.get("/v1/hold")).toBe(1);
    // The holder's audit names the broker that answered.
    const port = new URL(brokers[1]!.url).port;
    const answeredOn = new RegExp(`approved by admin token on ${hostname()} \\(http://[^)]*:${port}\\)`);
    await until(async () => answeredOn.test(audited(0)), "broker 1's audit naming broker 2");
    // Answered: gone from both brokers' lists, and its answer in Redis holds no secret either.
    expect(await pending(0)).toEqual([]);
    expect(await pending(1)).toEqual([]);
    expect(await raw.get(`${PREFIX}approval-answer:${view.id}`)).toMatch(/^[A-Za-z0-9+/=]+$/);
    expect(await redisLeaks(raw, secrets)).toEqual([]);
  });

  it("deny on broker 2: the client on broker 1 gets 403 policy_denied and nothing goes upstream", async () => {
    const before = hits.get("/v1/hold");
    const { view, done } = await hold(0, "/v1/hold", 1);
    expect(await answer(1, view.id, "deny")).toBe(200);
    const r = await done;
    expect(r.status).toBe(403);
    expect(r.code).toBe("policy_denied");
    expect(r.text).toContain(view.id);
    expect(hits.get("/v1/hold")).toBe(before);
  });

  it("two approves at once, one from each broker: exactly one succeeds, and the request goes out once", async () => {
    const { view, done } = await hold(1, "/v1/race", 0);
    // Both brokers list it before the race.
    expect((await pending(1)).map((p) => p.id)).toContain(view.id);
    const answers = await Promise.all([kb(0, "approve", view.id), kb(1, "approve", view.id)]);
    expect(answers.map((a) => a.status).sort()).toEqual([0, 1]);
    const loser = answers.find((a) => a.status === 1)!;
    expect(loser.stderr).toContain(`no pending approval "${view.id}"`);
    const r = await done;
    expect(r.status, r.text).toBe(200);
    expect(hits.get("/v1/race")).toBe(1);
  });

  it("approve --for on broker 2 lets the next matching request on broker 1 through unheld", async () => {
    const { view, done } = await hold(0, "/v1/grant", 1);
    const approve = await kb(1, "approve", view.id, "--for", "10m");
    expect(approve.status, approve.stderr).toBe(0);
    expect((await done).status).toBe(200);
    // The next one passes at once: never listed anywhere, straight to the upstream.
    const next = await send(0, "/v1/grant");
    expect(next.status, next.text).toBe(200);
    expect(hits.get("/v1/grant")).toBe(2);
    expect(brokers[0]!.stderr()).toContain("an earlier approve --for");
  });

  it("unanswered: 403 approval_timeout from the holder, after which no broker lists or answers it", async () => {
    const { view, done } = await hold(0, "/v1/slow", 1);
    expect(view.seconds_left).toBeLessThanOrEqual(1);
    const r = await done;
    expect(r.status).toBe(403);
    expect(r.code).toBe("approval_timeout");
    expect((await pending(1)).map((p) => p.id)).not.toContain(view.id);
    expect(await answer(1, view.id, "approve")).toBe(404);
    expect(hits.get("/v1/slow")).toBeUndefined();
  });

  it("Redis stalled: the holder refuses on time and withdraws alone; once Redis answers, the fleet sees what it holds and not what ended", async () => {
    const hangUp = new AbortController();
    const first = await hold(0, "/v1/down", 1, hangUp.signal);
    const firstDone = first.done.catch(() => "hung up");
    process.kill(redis.pid!, "SIGSTOP");
    let second: Promise<Sent>;
    let waiting: string;
    try {
      // Held now: refused on time all the same (its timeout is 1 s, Redis's command timeout 2 s).
      const refused = await send(0, "/v1/slow");
      expect(refused.status).toBe(403);
      expect(refused.code).toBe("approval_timeout");
      // The first one's client hangs up: the holder withdraws it without Redis.
      hangUp.abort();
      expect(await firstDone).toBe("hung up");
      await until(
        async () => audited(0).includes(`approval ${first.view.id} withdrawn`),
        "broker 1 withdrawing the first",
      );
      // One more held while Redis does not answer: broker 1 holds it from memory.
      // (its log line names it: the hold does not wait on Redis).
      const logged = () =>
        [...brokers[0]!.stderr().matchAll(/for approval ([0-9a-f]{8}):/g)].map((m) => m[1]!);
      const seen = logged().length;
      second = send(0, "/v1/down");
      waiting = await until(async () => logged()[seen], "broker 1 holding the second");
      // Broker 2, cut off as well, says that it lists and answers only what it holds.
      const listed = await until(async () => {
        const r = await kb(1, "approvals");
        return r.stderr.includes("has not answered since") ? r : undefined;
      }, "broker 2 saying it is cut off");
      expect(listed.stderr).toContain("only the requests this broker holds are listed");
      const unknown = await kb(1, "deny", "0badc0de");
      expect(unknown.status).toBe(1);
      expect(unknown.stderr).toContain("on this broker: the fleet's Redis has not answered since");
    } finally {
      process.kill(redis.pid!, "SIGCONT");
    }
    // Redis runs what waited for it: the second is shared, the first is gone from the list.
    const list = await until(async () => {
      const ids = (await pending(1)).map((p) => p.id);
      return ids.includes(waiting) ? ids : undefined;
    }, "broker 2 listing the second");
    expect(list).not.toContain(first.view.id);
    expect(await answer(1, waiting, "approve")).toBe(200);
    const r = await second;
    expect(r.status, r.text).toBe(200);
    expect(hits.get("/v1/down")).toBe(1);
    expect(hits.get("/v1/slow")).toBeUndefined();
  });

  it("Redis restarted empty: the holder publishes its pending request again, and another broker answers it", async () => {
    const held = await hold(0, "/v1/down", 1);
    await redis.restart();
    await until(
      async () => (await pending(1)).some((p) => p.id === held.view.id),
      "broker 2 listing the request again",
    );
    expect(await answer(1, held.view.id, "approve")).toBe(200);
    const r = await held.done;
    expect(r.status, r.text).toBe(200);
    expect(hits.get("/v1/down")).toBe(2);
  });
});
