// Credential pools (docs/spec.md §7): only the credential that got a quota answer is marked, the
// request moves to another credential before the client sees anything, exhausted pools fall
// back or answer pool_exhausted, and marks survive restarts.

import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { join } from "node:path";
import { Readable } from "node:stream";
import { ProxyAgent, request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { cliAsync, startBroker } from "../helpers/broker.js";
import { type Fixture, HOSTS, startFixture } from "../helpers/fixture.js";
import { type AnyFixture, type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { brokerError, rawExchange } from "../helpers/raw.js";
import type { FakeUpstream } from "../helpers/upstream.js";

const KEYS = {
  KEY_A: "sk-pool-aaaaaaaaaaaaaaaaaaaaaaaa",
  KEY_B: "sk-pool-bbbbbbbbbbbbbbbbbbbbbbbb",
  KEY_C: "sk-pool-cccccccccccccccccccccccc",
};
const OR_KEY = "sk-or-fallback-dddddddddddddddddddd";

type Behaviour = "ok" | { status: number; headers?: Record<string, string>; body: string };

/** The fake provider answers per key: a map from the real key to what it says. */
function perKey(upstream: FakeUpstream, path: string, behaviour: Map<string, Behaviour>): string[] {
  const seen: string[] = [];
  upstream.routes.set(`POST ${path}`, (req: IncomingMessage, res: ServerResponse) => {
    const key = String(req.headers.authorization ?? "").replace(/^Bearer /, "");
    seen.push(key);
    const b = behaviour.get(key) ?? "ok";
    if (b === "ok") {
      const body = JSON.stringify({
        ok: true,
        key: Object.entries(KEYS).find(([, v]) => v === key)?.[0] ?? "other",
      });
      res.writeHead(200, { "content-type": "application/json" });
      res.end(body);
      return;
    }
    res.writeHead(b.status, { "content-type": "application/json", ...b.headers });
    res.end(b.body);
  });
  return seen;
}

const QUOTA_429: Behaviour = {
  status: 429,
  headers: { "retry-after": "120" },
  body: JSON.stringify({ error: { type: "insufficient_quota", message: "You exceeded your current quota" } }),
};

function poolRules(u: FakeUpstream, extra = ""): string {
  const resolve = HOSTS.map((h) => `  "${h}:443": "127.0.0.1:${u.port}"`).join("\n");
  return `version: 1
upstream_ca: [${JSON.stringify(u.caPath)}]
resolve:
${resolve}
  "openrouter.ai:443": "127.0.0.1:${u.port}"
providers:
  openai:
    credentials: [KEY_A, KEY_B, KEY_C]
${extra}`;
}

const open: AnyFixture[] = [];
afterEach(async () => {
  for (const f of open.splice(0)) {
    await f.close();
    expect(f.leaks()).toEqual([]);
  }
});

/** A broker on the pool rules, built in this process. */
async function fixture(
  extra = "",
  opts: { prepareHome?: (home: string) => void } = {},
): Promise<InProcessFixture> {
  const f = await startInProcessFixture({
    rules: (u) => poolRules(u, extra),
    env: { ...KEYS, OPENROUTER_API_KEY: OR_KEY },
    ...opts,
  });
  open.push(f);
  return f;
}

/** A broker process on the pool rules, for the tests of restarts and kill -9. */
async function childFixture(): Promise<Fixture> {
  const f = await startFixture({ rules: (u) => poolRules(u), env: { ...KEYS, OPENROUTER_API_KEY: OR_KEY } });
  open.push(f);
  return f;
}

async function call(f: AnyFixture, agent: ProxyAgent, body = '{"model":"gpt-test"}') {
  const ph = await f.placeholder("openai");
  const res = await request("https://api.openai.com/v1/chat/completions", {
    method: "POST",
    dispatcher: agent,
    headers: { authorization: `Bearer ${ph}`, "content-type": "application/json" },
    body,
  });
  return {
    status: res.statusCode,
    headers: res.headers,
    json: (await res.body.json()) as Record<string, unknown>,
  };
}

async function statusJson(f: AnyFixture) {
  const r = await f.cli(["status", "--json"]);
  expect(r.status, r.stderr).toBe(0);
  const report = JSON.parse(r.stdout) as {
    running: boolean;
    providers: { id: string; credentials: { id: string; state: string; until?: string }[] }[];
  };
  return report;
}

function openaiStates(report: Awaited<ReturnType<typeof statusJson>>): Record<string, string> {
  const p = report.providers.find((x) => x.id === "openai")!;
  return Object.fromEntries(p.credentials.map((c) => [c.id, c.state]));
}

/**
 * A reverse-mode chat call while every openai key answers 429 insufficient_quota: what came back,
 * and the keys the fallback provider (openrouter's path on the same fake) was called with.
 */
async function callExhausted(f: AnyFixture, body = '{"model":"gpt-test"}') {
  perKey(f.upstream, "/v1/chat/completions", new Map(Object.values(KEYS).map((k) => [k, QUOTA_429])));
  const seenOr = perKey(f.upstream, "/api/v1/chat/completions", new Map());
  const res = await request(`${f.broker.url}/p/openai/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: "Bearer dummy", "content-type": "application/json" },
    body,
  });
  return {
    status: res.statusCode,
    error: res.headers["x-keybroker-error"],
    text: await res.body.text(),
    seenOr,
  };
}

describe("credential pools", () => {
  it("(a) marks only the exhausted credential and serves the client from the next one; (b) reset brings it back", async () => {
    const f = await fixture();
    const behaviour = new Map<string, Behaviour>([[KEYS.KEY_A, QUOTA_429]]);
    const seen = perKey(f.upstream, "/v1/chat/completions", behaviour);
    const agent = f.proxyAgent();
    const r = await call(f, agent);
    expect(r.status).toBe(200);
    expect(r.json.key).toBe("KEY_B");
    expect(seen).toEqual([KEYS.KEY_A, KEYS.KEY_B]);
    const report = await statusJson(f);
    expect(report.running).toBe(true);
    expect(openaiStates(report)).toEqual({ KEY_A: "usage_limit_reached", KEY_B: "ok", KEY_C: "ok" });
    const until = Date.parse(report.providers.find((p) => p.id === "openai")!.credentials[0]!.until!);
    expect(until).toBeGreaterThan(Date.now() + 60_000); // retry-after: 120

    // While marked, A is not tried again.
    expect((await call(f, agent)).json.key).toBe("KEY_B");
    expect(seen.filter((k) => k === KEYS.KEY_A)).toHaveLength(1);

    behaviour.clear();
    const reset = await f.cli(["auth", "reset", "openai"]);
    expect(reset.status, reset.stderr).toBe(0);
    expect(reset.stdout).toContain("KEY_A");
    expect((await call(f, agent)).json.key).toBe("KEY_A");
    expect(openaiStates(await statusJson(f)).KEY_A).toBe("ok");
    await agent.close();
  });

  it("(c) answers pool_exhausted with the earliest retry-after when every credential is out", async () => {
    const f = await fixture();
    const resets = { [KEYS.KEY_A]: "300", [KEYS.KEY_B]: "90", [KEYS.KEY_C]: "600" };
    perKey(
      f.upstream,
      "/v1/chat/completions",
      new Map(
        Object.entries(resets).map(([k, s]) => [
          k,
          { status: 429, headers: { "retry-after": s }, body: "{}" } as Behaviour,
        ]),
      ),
    );
    const agent = f.proxyAgent();
    const r = await call(f, agent);
    expect(r.status).toBe(429);
    expect(r.headers["x-keybroker-error"]).toBe("pool_exhausted");
    const retryAfter = Number(r.headers["retry-after"]);
    expect(retryAfter).toBeGreaterThan(80);
    expect(retryAfter).toBeLessThanOrEqual(90);
    expect(openaiStates(await statusJson(f))).toEqual({
      KEY_A: "usage_limit_reached",
      KEY_B: "usage_limit_reached",
      KEY_C: "usage_limit_reached",
    });
    await agent.close();
  });

  it("answers credential_unavailable, not pool_exhausted, for a provider that lists no credentials", async () => {
    const f = await startInProcessFixture({
      rules: (u) =>
        poolRules(u).replace(
          "credentials: [KEY_A, KEY_B, KEY_C]",
          'credentials: []\n    placeholder: { value: "sk-kb-nocred-0123456789" }',
        ),
      env: KEYS,
    });
    open.push(f);
    const agent = f.proxyAgent();
    const res = await request("https://api.openai.com/v1/chat/completions", {
      method: "POST",
      dispatcher: agent,
      headers: { authorization: "Bearer sk-kb-nocred-0123456789", "content-type": "application/json" },
      body: "{}",
    });
    const text = await res.body.text();
    expect(res.statusCode).toBe(503);
    expect(res.headers["x-keybroker-error"]).toBe("credential_unavailable");
    expect(text).toContain('provider \\"openai\\" has no credentials configured');
    await agent.close();
  });

  it("(c) falls back to the configured provider in reverse mode", async () => {
    const f = await fixture(`  openrouter:
    credentials: [OPENROUTER_API_KEY]
fallbacks: { openai: [openrouter] }
`);
    const r = await callExhausted(f);
    expect(r.status, r.text).toBe(200);
    expect(r.seenOr).toEqual([OR_KEY]);
    expect(f.upstream.received.at(-1)!.host).toBe("openrouter.ai");
  });

  it("(c) takes no fallback whose policy would refuse or hold the request", async () => {
    const f = await fixture(`  openrouter:
    credentials: [OPENROUTER_API_KEY]
    policy:
      - deny: { method: POST, path: "/api/v1/chat/**" }
fallbacks: { openai: [openrouter] }
`);
    const r = await callExhausted(f);
    // The pool's own answer: openrouter's deny rule is not bypassed by arriving as a fallback.
    expect(r.status, r.text).toBe(429);
    expect(r.error).toBe("pool_exhausted");
    expect(r.seenOr).toEqual([]);
    expect(f.broker.stderr()).toContain("fallback skipped");
  });

  it("(c) takes no fallback with policy rules for a path that has more than one reading (decision 101)", async () => {
    const f = await fixture(`  openrouter:
    credentials: [OPENROUTER_API_KEY]
    policy:
      - deny: { method: POST, path: "/api/v1/chat/**" }
fallbacks: { openai: [openrouter] }
`);
    // openai has no policy: it gets the path as sent, and every key is out of quota there.
    const path = "/v1/%63hat/completions/%zz/..";
    perKey(f.upstream, path, new Map(Object.values(KEYS).map((k) => [k, QUOTA_429])));
    const body = '{"model":"gpt-test"}';
    const text = await rawExchange(
      f.broker.port,
      `POST /p/openai${path} HTTP/1.1\r\nHost: 127.0.0.1:${f.broker.port}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    );
    // A server reads it as /api/v1/chat/completions, which openrouter's deny rule refuses.
    expect(brokerError(text)).toMatchObject({ status: 429, code: "pool_exhausted" });
    expect(f.upstream.received.filter((r) => r.host === "openrouter.ai")).toEqual([]);
    expect(f.broker.stderr()).toContain("fallback skipped");
  });

  it("(c) maps the model name for the fallback provider", async () => {
    const f = await fixture(`  openrouter:
    credentials: [OPENROUTER_API_KEY]
fallbacks:
  openai: [{ provider: openrouter, model: { gpt-test: "openai/gpt-test" } }]
`);
    const r = await callExhausted(f, '{"model":"gpt-test","messages":[]}');
    expect(r.status, r.text).toBe(200);
    const got = f.upstream.received.at(-1)!;
    expect(got.url).toBe("/api/v1/chat/completions");
    expect(JSON.parse(got.body.toString())).toEqual({ model: "openai/gpt-test", messages: [] });
  });

  it("(d) drops a mark whose reset time has passed and tries the credential again", async () => {
    const f = await fixture("", {
      prepareHome: (home) => {
        mkdirSync(join(home, "state"), { recursive: true, mode: 0o700 });
        const past = Date.now() - 60_000;
        writeFileSync(
          join(home, "state", "pools.json"),
          JSON.stringify({
            version: 1,
            providers: {
              openai: { KEY_A: { state: "usage_limit_reached", until: past, requests: 1, marks: 1 } },
            },
          }),
          { mode: 0o600 },
        );
      },
    });
    const seen = perKey(f.upstream, "/v1/chat/completions", new Map());
    const agent = f.proxyAgent();
    expect((await call(f, agent)).json.key).toBe("KEY_A");
    expect(seen).toEqual([KEYS.KEY_A]);
    expect(openaiStates(await statusJson(f)).KEY_A).toBe("ok");
    await agent.close();
  });

  it("(e) under 50 concurrent requests no mark is lost and every client gets a 200", async () => {
    const f = await fixture();
    const behaviour = new Map<string, Behaviour>([[KEYS.KEY_A, QUOTA_429]]);
    const seen = perKey(f.upstream, "/v1/chat/completions", behaviour);
    const agent = new ProxyAgent({
      uri: f.broker.url,
      requestTls: { ca: readFileSync(f.broker.caPath, "utf8") },
      connections: 50,
    });
    const results = await Promise.all(Array.from({ length: 50 }, () => call(f, agent)));
    expect(results.map((r) => r.status)).toEqual(Array(50).fill(200));
    expect(results.every((r) => r.json.key !== "KEY_A")).toBe(true);
    const aHits = seen.filter((k) => k === KEYS.KEY_A).length;
    expect(aHits).toBeGreaterThanOrEqual(1);
    // Every 429 A got was recorded as a mark.
    const state = JSON.parse((await f.cli(["status", "--json"])).stdout) as {
      providers: { id: string; credentials: { id: string; marks: number }[] }[];
    };
    expect(
      state.providers.find((p) => p.id === "openai")!.credentials.find((c) => c.id === "KEY_A")!.marks,
    ).toBe(aHits);
    // Once the mark is recorded, A is never sent again.
    const after = seen.length;
    await Promise.all(Array.from({ length: 10 }, () => call(f, agent)));
    expect(seen.slice(after)).not.toContain(KEYS.KEY_A);
    await agent.close();
  });

  it("(f) keeps marks across a restart, and recovers from a corrupt state file", async () => {
    const f = await childFixture();
    perKey(f.upstream, "/v1/chat/completions", new Map([[KEYS.KEY_A, QUOTA_429]]));
    const agent = f.proxyAgent();
    expect((await call(f, agent)).json.key).toBe("KEY_B");
    await agent.close();
    await f.broker.stop();
    const config = join(f.dir, "keybroker.yaml");
    const env = { ...KEYS, OPENROUTER_API_KEY: OR_KEY };
    const again = await startBroker({ home: f.home, config, env });
    const r1 = await cliAsync(["status", "--json", "--home", f.home, "--config", config]);
    expect(openaiStates(JSON.parse(r1.stdout))).toMatchObject({ KEY_A: "usage_limit_reached" });
    await again.stop();

    writeFileSync(join(f.home, "state", "pools.json"), "{ not json");
    const third = await startBroker({ home: f.home, config, env });
    try {
      expect(third.stderr()).toContain("moved it to");
      expect(readdirSync(join(f.home, "state")).some((n) => n.startsWith("pools.json.corrupt-"))).toBe(true);
      const agent3 = new ProxyAgent({
        uri: third.url,
        requestTls: { ca: readFileSync(third.caPath, "utf8") },
      });
      const seen = perKey(f.upstream, "/v1/chat/completions", new Map());
      expect((await call(f, agent3)).status).toBe(200);
      expect(seen).toEqual([KEYS.KEY_A]);
      await agent3.close();
    } finally {
      await third.stop();
    }
  });

  it("(f2) keeps every mark through kill -9 right after the client got its answer, run after run", async () => {
    const f = await childFixture();
    const config = join(f.dir, "keybroker.yaml");
    const env = { ...KEYS, OPENROUTER_API_KEY: OR_KEY };
    const statePath = join(f.home, "state", "pools.json");
    const onDisk = (): Record<string, { state: string; until?: number }> => {
      const data = JSON.parse(readFileSync(statePath, "utf8")) as {
        providers: Record<string, Record<string, { state: string; until?: number }>>;
      };
      return data.providers.openai ?? {};
    };
    // Four runs: each kind twice. The mark is written before the answer, so a lost one shows in any run.
    const RUNS = 4;
    let broker = f.broker;
    for (let run = 0; run < RUNS; run++) {
      // Even runs: A is out of quota, the request is retried on B and the client gets 200.
      // Odd runs: every key is out of quota, the client gets the 429.
      const retryAfter = 600 + run * 60;
      const quota: Behaviour = { ...QUOTA_429, headers: { "retry-after": String(retryAfter) } };
      const marked = run % 2 === 0 ? [KEYS.KEY_A] : [KEYS.KEY_A, KEYS.KEY_B, KEYS.KEY_C];
      perKey(f.upstream, "/v1/chat/completions", new Map(marked.map((k) => [k, quota])));
      const agent = new ProxyAgent({
        uri: broker.url,
        requestTls: { ca: readFileSync(broker.caPath, "utf8") },
      });
      const before = Date.now();
      const r = await call(f, agent);
      // The answer is in hand: kill -9 at once, before any timer of the broker's could run.
      const exited = new Promise((resolve) => broker.child.once("exit", resolve));
      broker.child.kill("SIGKILL");
      await exited;
      await agent.destroy();
      expect(r.status, `run ${run}`).toBe(run % 2 === 0 ? 200 : 429);
      const states = onDisk();
      for (const id of run % 2 === 0 ? ["KEY_A"] : ["KEY_A", "KEY_B", "KEY_C"]) {
        expect(states[id]?.state, `run ${run}: ${id}`).toBe("usage_limit_reached");
        expect(states[id]!.until!, `run ${run}: ${id}`).toBeGreaterThanOrEqual(
          before + retryAfter * 1000 - 1000,
        );
      }
      // A restarted broker has the marks: status shows them. Then the next run starts from none.
      await broker.stop();
      broker = await startBroker({ home: f.home, config, env });
      const r2 = await cliAsync(["status", "--json", "--home", f.home, "--config", config]);
      expect(openaiStates(JSON.parse(r2.stdout)).KEY_A, `run ${run} after restart`).toBe(
        "usage_limit_reached",
      );
      expect((await cliAsync(["auth", "reset", "openai", "--home", f.home, "--config", config])).status).toBe(
        0,
      );
    }
    await broker.stop();
  }, 120_000);

  it("(g) streams a body above the retry limit and passes its 429 through, with the mark recorded", async () => {
    const f = await fixture("    pool: { retry_body_limit: 1KiB }\n");
    const total = 256 * 1024;
    let firstBytes!: () => void;
    const reading = new Promise<void>((r) => {
      firstBytes = r;
    });
    const keys: string[] = [];
    f.upstream.streamingRoutes.set("POST /v1/files", (req, res) => {
      keys.push(String(req.headers.authorization));
      let n = 0;
      req.on("data", (c: Buffer) => {
        if (n === 0) firstBytes();
        n += c.length;
      });
      req.on("end", () => {
        res.writeHead(429, { "content-type": "application/json", "retry-after": "30" });
        res.end(JSON.stringify({ error: { type: "rate_limit_exceeded", received: n } }));
      });
    });
    const ph = await f.placeholder("openai");
    const chunk = Buffer.alloc(16 * 1024, 1);
    async function* body() {
      yield chunk;
      await reading; // a broker that buffered the body would never let the upstream read
      for (let sent = chunk.length; sent < total; sent += chunk.length) yield chunk;
    }
    const agent = f.proxyAgent();
    const res = await request("https://api.openai.com/v1/files", {
      method: "POST",
      dispatcher: agent,
      headers: { authorization: `Bearer ${ph}`, "content-length": String(total) },
      body: Readable.from(body()),
    });
    expect(res.statusCode).toBe(429);
    const json = (await res.body.json()) as { error: { type: string; received: number } };
    expect(json.error).toEqual({ type: "rate_limit_exceeded", received: total });
    expect(keys).toEqual([`Bearer ${KEYS.KEY_A}`]);
    expect(openaiStates(await statusJson(f)).KEY_A).toBe("usage_limit_reached");
    await agent.close();
  });
});
