// A bug inside keybroker is not the client's bad request (docs/spec.md §11, decision 99): it answers 500
// internal_error with a generic message (nothing of the error's text or stack, which may hold
// anything), logs the error with its stack, and the broker keeps serving. The bug is real: an
// in-process broker built from rules with a faulty part, a provider rule whose `policy` throws
// a TypeError once the broker is serving (as a stage reading a half-built rule would). It is the
// injection settings, which every request toward a key provider reads (the policy stage runs only
// for rule sets that have policy, decision 170).
import { readFileSync } from "node:fs";
import { ProxyAgent, request } from "undici";
import { afterEach, expect, it } from "vitest";
import { createLogger } from "../../core/log.js";
import { Broker } from "../../proxy/server.js";
import type { ProviderRule, Rules } from "../../rules/types.js";
import { tempHome } from "../helpers/broker.js";
import { rawExchange } from "../helpers/raw.js";
import { parseSnippet } from "../helpers/rules.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const DETAIL = "faulty-part-detail-3f9a1c";

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

function faultyRules(u: FakeUpstream, armed: () => boolean): Rules {
  const rules = parseSnippet(`upstream_ca: [${JSON.stringify(u.caPath)}]
resolve:
  "api.openai.com:443": "127.0.0.1:${u.port}"
  "api.anthropic.com:443": "127.0.0.1:${u.port}"
catalogue: false
providers:
  openai: { credentials: [OPENAI_API_KEY] }
  anthropic: { credentials: [ANTHROPIC_API_KEY] }
`);
  const faulty = (rule: ProviderRule): ProviderRule => {
    const inject = rule.inject;
    return Object.defineProperty({ ...rule }, "inject", {
      get: () => {
        if (armed()) throw new TypeError(`cannot read the injection settings (${DETAIL})`);
        return inject;
      },
    });
  };
  return { ...rules, providers: rules.providers.map((p) => (p.id === "openai" ? faulty(p) : p)) };
}

it("a throw that is not a refusal answers 500 internal_error, logged with its stack, told to nobody", async () => {
  const u = await startUpstream();
  cleanup.push(() => u.close());
  let armed = false;
  const lines: string[] = [];
  const broker = await Broker.create({
    home: tempHome(),
    rules: faultyRules(u, () => armed),
    log: createLogger("info", { env: {}, stream: { write: (l: string) => lines.push(l) } }),
    env: { OPENAI_API_KEY: "sk-openai-internal-error-test-0001", ANTHROPIC_API_KEY: "sk-ant-internal-0002" },
    port: 0,
  });
  cleanup.push(() => broker.close());
  const { url } = await broker.listen();
  armed = true;
  const agent = new ProxyAgent({ uri: url, requestTls: { ca: readFileSync(broker.ca.certPath, "utf8") } });
  cleanup.push(() => agent.close());

  const res = await request("https://api.openai.com/v1/chat/completions", {
    method: "POST",
    dispatcher: agent,
    headers: { "content-type": "application/json" },
    body: "{}",
  });
  const text = await res.body.text();
  expect(res.statusCode).toBe(500);
  expect(res.headers["x-keybroker-error"]).toBe("internal_error");
  expect(JSON.parse(text).error.type).toBe("internal_error");
  expect(text).toContain("internal error in keybroker; see its log");
  for (const told of [DETAIL, "TypeError", "injection", " at "]) expect(text).not.toContain(told);
  expect(u.received.filter((r) => r.url === "/v1/chat/completions")).toEqual([]);

  const logged = lines.map((l) => JSON.parse(l) as { msg: string; err?: { stack?: string } });
  const line = logged.find((l) => l.msg === "internal error while handling a request");
  expect(line?.err?.stack).toContain(`TypeError: cannot read the injection settings (${DETAIL})`);
  expect(line?.err?.stack).toMatch(/\n +at /);

  // The broker serves everyone else as before.
  const other = await request("https://api.anthropic.com/v1/messages", {
    method: "POST",
    dispatcher: agent,
    headers: { "content-type": "application/json" },
    body: "{}",
  });
  await other.body.dump();
  expect(other.statusCode).toBe(200);
});

it("bad input stays the client's mistake: 400 bad_request, not internal_error", async () => {
  const u = await startUpstream();
  cleanup.push(() => u.close());
  const lines: string[] = [];
  const broker = await Broker.create({
    home: tempHome(),
    rules: faultyRules(u, () => false),
    log: createLogger("info", { env: {}, stream: { write: (l: string) => lines.push(l) } }),
    env: {},
    port: 0,
  });
  cleanup.push(() => broker.close());
  const { port } = await broker.listen();
  const badEscape = `Proxy-Authorization: Basic ${Buffer.from("%zz:x").toString("base64")}\r\n`;
  for (const head of [
    `GET http://example.test/ HTTP/1.1\r\nHost: example.test\r\n${badEscape}`,
    `CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n${badEscape}`,
    "GET http://a..b/ HTTP/1.1\r\nHost: a..b\r\n",
  ]) {
    const answer = await rawExchange(port, `${head}Connection: close\r\n\r\n`);
    expect(answer, head).toMatch(/^HTTP\/1\.1 400 /);
    expect(answer, head).toContain("x-keybroker-error: bad_request");
  }
  expect(lines.join("")).not.toContain("internal error");
});
