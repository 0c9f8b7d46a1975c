// The request stages that plan and write the credential, and read or check the body, each on an
// exchange built in the test (test/helpers/exchange.ts).
import { PassThrough, Writable } from "node:stream";
import { beforeAll, describe, expect, it } from "vitest";
import { BrokerError } from "../../../../core/errors.js";
import { createLogger } from "../../../../core/log.js";
import { matchProvider } from "../../../../proxy/pipeline.js";
import type { Runtime } from "../../../../proxy/runtime.js";
import { checkBodyPlaceholders } from "../../../../proxy/stages/check-body-placeholders.js";
import { applyHeaderRules, createPlanInjection, substitute } from "../../../../proxy/stages/inject.js";
import { planMcp } from "../../../../proxy/stages/mcp.js";
import { pickCredential, readBody, SMALL_BODY } from "../../../../proxy/stages/pick-credential.js";
import { type RequestInit, sentHeader, testExchange, testRuntime } from "../../../helpers/exchange.js";

const OPENAI = "sk-stage-test-openai-1";
const OPENAI_2 = "sk-stage-test-openai-2";
const GITHUB = "ghp_stagetestgithub";
const RULES = `catalogue: false
intercept: all
providers:
  openai:
    hosts: [api.openai.com]
    credentials: [OPENAI_API_KEY, OPENAI_API_KEY_2]
    headers: { set: { openai-beta: assistants=v2 }, remove: [x-debug] }
  github:
    hosts: [api.github.com]
    inject: { basic: { username: x-access-token } }
    credentials: [GITHUB_TOKEN]
  notes:
    mcp: https://mcp.example.com/mcp
clients:
  default: { role: owner }
  narrow: { providers: [github] }
`;
const ENV = { OPENAI_API_KEY: OPENAI, OPENAI_API_KEY_2: OPENAI_2, GITHUB_TOKEN: GITHUB };

let rt: Runtime;
const warnings: string[] = [];
const planInjection = createPlanInjection(
  createLogger("warn", { env: {}, stream: { write: (line: string) => warnings.push(line) } }),
);
beforeAll(async () => {
  rt = await testRuntime(RULES, ENV);
});

function matched(init: RequestInit) {
  const x = testExchange(rt, init);
  matchProvider(x);
  return x;
}

/** An exchange to openai carrying the client's placeholder in Authorization, planned. */
function planned(init: Partial<RequestInit> = {}) {
  const client = init.client ?? "default";
  const x = matched({
    host: "api.openai.com",
    ...init,
    headers: { authorization: `Bearer ${rt.placeholders.get(client, "openai")}`, ...init.headers },
  });
  planInjection(x);
  return x;
}

async function refusal(run: () => unknown): Promise<BrokerError> {
  try {
    await run();
  } catch (err) {
    if (err instanceof BrokerError) return err;
    throw err;
  }
  throw new Error("expected a refusal");
}

describe("planInjection", () => {
  it("plans an injection where the placeholder sits at an injection point", () => {
    const x = planned();
    expect(x.placeholder).toBe(rt.placeholders.get("default", "openai"));
    expect(x.injection?.sites?.headers).toEqual([3]);
  });

  it("plans none when the placeholder is elsewhere, and warns if it was seen", () => {
    const x = matched({ host: "api.openai.com", headers: { "x-key": "no placeholder" } });
    x.placeholderSeenAt.push("header x-other");
    planInjection(x);
    expect(x.injection).toBeUndefined();
    expect(warnings.join("")).toContain("outside the provider's injection points");
  });

  it("finds the placeholder inside Basic credentials", () => {
    const basic = Buffer.from(`x-access-token:${rt.placeholders.get("default", "github")}`).toString(
      "base64",
    );
    const x = matched({ host: "api.github.com", headers: { authorization: `Basic ${basic}` } });
    planInjection(x);
    expect(x.injection?.sites?.basic).toBe(3);
  });
});

describe("planMcp", () => {
  it("plans the token for every request to an MCP server, refuses its authorization metadata", () => {
    const x = matched({ host: "mcp.example.com", path: "/mcp" });
    planMcp(x);
    expect(x.injection?.sites).toBeUndefined();
    expect(x.placeholder).toBe(rt.placeholders.get("default", "notes"));
    const meta = matched({ host: "mcp.example.com", path: "/.well-known/oauth-protected-resource" });
    return refusal(() => planMcp(meta)).then((err) => expect(err.code).toBe("policy_denied"));
  });

  it("refuses a client that may not use the server", async () => {
    const x = matched({ host: "mcp.example.com", path: "/mcp", client: "narrow" });
    expect((await refusal(() => planMcp(x))).code).toBe("client_unauthorized");
  });
});

describe("readBody", () => {
  it("reads a small body ahead, leaves one of unknown length streaming", async () => {
    const x = planned({ method: "POST", body: '{"model":"m"}' });
    await readBody(x);
    expect(x.body?.toString()).toBe('{"model":"m"}');
    const chunked = planned({ method: "POST", headers: { "transfer-encoding": "chunked" } });
    await readBody(chunked);
    expect(chunked.body).toBeUndefined();
  });

  it("reads ahead a body too big to read otherwise when another credential may need it", async () => {
    const big = "x".repeat(SMALL_BODY + 1);
    const pooled = planned({ method: "POST", body: big });
    await readBody(pooled);
    expect(pooled.body?.length).toBe(big.length);
    const single = matched({ host: "api.github.com", method: "POST", body: big });
    await readBody(single);
    expect(single.body).toBeUndefined();
  });
});

describe("readBody, a body already whole in the request", () => {
  /** `x` with its request replaced by a stream of `parts`, `complete` as node's IncomingMessage says. */
  function withRequest(parts: string[], complete: boolean, end: boolean) {
    const x = planned({ method: "POST", body: parts.join("") });
    const req = Object.assign(new PassThrough(), { headers: x.req.headers, complete });
    for (const p of parts) req.write(p);
    if (end) req.end();
    (x as { req: unknown }).req = req;
    return { x, req };
  }

  it("takes a body that came whole at once, with no promise to wait on", async () => {
    const { x } = withRequest(['{"model":', '"m"}'], true, true);
    // Give the stream a turn to move what was written into its readable side.
    await new Promise((r) => setImmediate(r));
    expect(readBody(x)).toBeUndefined();
    expect(x.body?.toString()).toBe('{"model":"m"}');
  });

  it("waits for a body still arriving, and gets all of it", async () => {
    const { x, req } = withRequest(['{"model":'], false, false);
    await new Promise((r) => setImmediate(r));
    const pending = readBody(x);
    expect(pending).toBeInstanceOf(Promise);
    req.end('"m"}');
    await pending;
    expect(x.body?.toString()).toBe('{"model":"m"}');
  });
});

describe("checkBodyPlaceholders", () => {
  it("refuses a body carrying a placeholder to a host of no provider (intercept: all)", async () => {
    const leak = matched({
      host: "example.org",
      method: "POST",
      body: `k=${rt.placeholders.get("default", "openai")}`,
    });
    await readBody(leak);
    expect((await refusal(() => checkBodyPlaceholders(leak))).code).toBe("placeholder_host_mismatch");
    const clean = matched({ host: "example.org", method: "POST", body: "k=v" });
    await readBody(clean);
    checkBodyPlaceholders(clean);
  });

  it("refuses a body it cannot decode, and checks a streamed body as it passes", async () => {
    const coded = matched({
      host: "example.org",
      method: "POST",
      body: "x",
      headers: { "content-encoding": "zstd-x" },
    });
    await readBody(coded);
    expect((await refusal(() => checkBodyPlaceholders(coded))).code).toBe("bad_request");
    const streamed = matched({
      host: "example.org",
      method: "POST",
      body: `k=${rt.placeholders.get("default", "github")}`,
      headers: { "transfer-encoding": "chunked" },
    });
    checkBodyPlaceholders(streamed);
    const sink = new Writable({ write: (_c, _e, done) => done() });
    const failed = new Promise<Error>((resolve) => streamed.bodyStream!.once("error", resolve));
    streamed.bodyStream!.pipe(sink);
    expect(((await failed) as BrokerError).code).toBe("placeholder_host_mismatch");
  });
});

describe("pickCredential", () => {
  it("swaps the placeholder for a pool member and records it as tried", async () => {
    const x = planned();
    await pickCredential(x);
    expect(sentHeader(x, "authorization")).toBe(`Bearer ${x.secret!.reveal()}`);
    expect([OPENAI, OPENAI_2]).toContain(x.secret!.reveal());
    expect(x.tried.size).toBe(1);
  });

  it("moves to the next member on a retry, and says when none is left", async () => {
    const x = planned();
    await pickCredential(x);
    const first = x.secret!.reveal();
    await pickCredential(x);
    expect(x.secret!.reveal()).not.toBe(first);
    expect(sentHeader(x, "authorization")).toBe(`Bearer ${x.secret!.reveal()}`);
    expect((await refusal(() => pickCredential(x))).code).toBe("pool_exhausted");
  });

  it("injects nothing into a request with no planned injection", async () => {
    const x = matched({ host: "api.openai.com", headers: { authorization: "Bearer mine" } });
    await pickCredential(x);
    expect(sentHeader(x, "authorization")).toBe("Bearer mine");
    expect(x.secret).toBeUndefined();
  });
});

describe("applyHeaderRules", () => {
  it("sets and removes the provider's headers, and asks for an uncompressed answer when injected", () => {
    const x = planned({ headers: { "x-debug": "1", "accept-encoding": "gzip" } });
    applyHeaderRules(x);
    expect(sentHeader(x, "openai-beta")).toBe("assistants=v2");
    expect(sentHeader(x, "x-debug")).toBeUndefined();
    expect(sentHeader(x, "accept-encoding")).toBe("identity");
    const other = matched({ host: "example.org", headers: { "x-debug": "1", "accept-encoding": "gzip" } });
    applyHeaderRules(other);
    expect([sentHeader(other, "x-debug"), sentHeader(other, "accept-encoding")]).toEqual(["1", "gzip"]);
  });
});

describe("substitute", () => {
  it("replaces every occurrence, reads no pattern in the value, and leaves text without one as it is", () => {
    expect(substitute("Bearer PH", "PH", "sk-$&-$1")).toBe("Bearer sk-$&-$1");
    expect(substitute("PH,PH;xPHx", "PH", "v")).toBe("v,v;xvx");
    expect(substitute("PHPH", "PH", "")).toBe("");
    const text = "no placeholder here";
    expect(substitute(text, "PH", "v")).toBe(text);
  });
});
