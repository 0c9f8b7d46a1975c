// WebSocket upgrades (OpenAI Realtime): the credential is injected into the upgrade request,
// intercepted and in reverse mode, and frames flow both ways afterwards.
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { ProxyAgent, request, WebSocket } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REAL_OPENAI } from "../helpers/fixture.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { brokerError } from "../helpers/raw.js";
import { openTunnel } from "../helpers/tunnel.js";

/** Sends a raw upgrade request through the broker's CONNECT tunnel; returns all it answered. */
async function rawUpgrade(
  target: string,
  path: string,
  authorization: string,
  connectHeaders: Record<string, string> = {},
): Promise<string> {
  const tls = await openTunnel(f.broker, target, connectHeaders);
  tls.write(
    `GET ${path} HTTP/1.1\r\nHost: ${target}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
      `Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n` +
      `Authorization: ${authorization}\r\n\r\n`,
  );
  let text = "";
  tls.setEncoding("utf8");
  tls.on("data", (d: string) => {
    text += d;
  });
  await once(tls, "close");
  return text;
}

const TOKENS = { KB_GUEST_TOKEN: "kb-guest-token-3e5a7c9b1d", KB_WORKER_TOKEN: "kb-worker-token-6b8d0f2a4c" };

let f: InProcessFixture;
beforeAll(async () => {
  f = await startInProcessFixture({
    // Client tokens, not provider secrets: `keybroker env --client` prints them in its proxy URL
    // on purpose, so they stay out of the leak scan's list.
    upstreamEnv: () => TOKENS,
    extraRules: `clients:
  default: { providers: "*" }
  visitor: { token: KB_GUEST_TOKEN, providers: [openai], role: guest }
  worker: { token: KB_WORKER_TOKEN, providers: [openai], role: user }
`,
  });
});

/** `client`'s openai placeholder, as `keybroker env --client` prints it where its token is set. */
async function clientPlaceholder(client: string): Promise<string> {
  const r = await f.cli(["env", "--client", client, "--format", "json"], { env: TOKENS });
  expect(r.status, r.stderr).toBe(0);
  return (JSON.parse(r.stdout) as Record<string, string>).OPENAI_API_KEY!;
}

/** Proxy-Authorization for a client with a token. */
function proxyAuth(client: string, token: string): string {
  return `Basic ${Buffer.from(`${client}:${token}`).toString("base64")}`;
}

/** A ProxyAgent through the broker that authenticates as `client`. */
function clientAgent(client: string, token: string): ProxyAgent {
  return new ProxyAgent({
    uri: f.broker.url,
    token: proxyAuth(client, token),
    requestTls: { ca: readFileSync(f.broker.caPath, "utf8") },
  });
}
afterAll(async () => {
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

async function firstMessage(ws: WebSocket): Promise<string> {
  const [event] = (await once(ws as unknown as NodeJS.EventEmitter, "message")) as [MessageEvent];
  return String(event.data);
}

describe("WebSocket upgrades", () => {
  it("injects the credential into an intercepted upgrade request", async () => {
    const ph = await f.placeholder("openai");
    const dispatcher = f.proxyAgent();
    const before = f.upstream.received.length;
    const ws = new WebSocket("wss://api.openai.com/v1/realtime?model=gpt-realtime", {
      dispatcher,
      headers: { authorization: `Bearer ${ph}` },
    });
    expect(await firstMessage(ws)).toBe("hello from upstream");
    const got = f.upstream.received.at(-1)!;
    expect(f.upstream.received.length).toBe(before + 1);
    expect(got.url).toBe("/v1/realtime?model=gpt-realtime");
    expect(got.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    expect(got.headers.upgrade).toBe("websocket");
    ws.close();
    await dispatcher.close();
  });

  it("refuses an upgrade carrying another provider's placeholder, sending nothing", async () => {
    const ph = await f.placeholder("anthropic");
    const dispatcher = f.proxyAgent();
    const before = f.upstream.received.length;
    const ws = new WebSocket("wss://api.openai.com/v1/realtime", {
      dispatcher,
      headers: { authorization: `Bearer ${ph}` },
    });
    await once(ws as unknown as NodeJS.EventEmitter, "error");
    expect(f.upstream.received.length).toBe(before);
    // The warning may be written just after the refusal went out.
    while (!f.broker.stderr().includes("possible exfiltration blocked")) await once(f.broker.logged, "data");
    await dispatcher.close();
  });

  it("serves upgrades in reverse mode with the credential set by keybroker", async () => {
    const ws = new WebSocket(`${f.broker.url.replace("http:", "ws:")}/p/openai/v1/realtime`, {
      headers: { authorization: "Bearer dummy" },
    });
    expect(await firstMessage(ws)).toBe("hello from upstream");
    expect(f.upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    ws.close();
  });

  it("scrubs an echo of the credential from the 101 headers and the frames", async () => {
    const ph = await f.placeholder("openai");
    const dispatcher = f.proxyAgent();
    const ws = new WebSocket("wss://api.openai.com/v1/realtime?echo=1", {
      dispatcher,
      headers: { authorization: `Bearer ${ph}` },
    });
    const message = await firstMessage(ws);
    expect(f.upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    expect(message).not.toContain(REAL_OPENAI);
    expect(message).toContain(ph.slice(0, 12));
    ws.close();
    await dispatcher.close();
  });

  it("passes the upstream's refusal of an upgrade to the client, scrubbed, and marks the credential", async () => {
    const ph = await f.placeholder("openai");
    const text = await rawUpgrade("api.openai.com", "/v1/realtime?refuse=1", `Bearer ${ph}`);
    expect(text).toMatch(/^HTTP\/1\.1 401 /);
    expect(f.upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    expect(text).toContain("bad key: Bearer ");
    expect(text).toContain(ph);
    expect(text).not.toContain(REAL_OPENAI);
    // The refusal marks the credential, as a refused request would (last: it stays marked).
    const r = await f.cli(["status", "--json"]);
    const report = JSON.parse(r.stdout) as { providers: { id: string; credentials: { state: string }[] }[] };
    expect(report.providers.find((p) => p.id === "openai")!.credentials[0]!.state).toBe("invalid");
  });

  it("refuses a guest's upgrade with 403 policy_denied: the upstream sees nothing (docs/spec.md §3.10)", async () => {
    const ph = await clientPlaceholder("visitor");
    const dispatcher = clientAgent("visitor", TOKENS.KB_GUEST_TOKEN);
    const before = f.upstream.received.length;
    const ws = new WebSocket("wss://api.openai.com/v1/realtime", {
      dispatcher,
      headers: { authorization: `Bearer ${ph}` },
    });
    const events = ws as unknown as NodeJS.EventEmitter;
    const first = await Promise.race([
      once(events, "open").then(() => "open"),
      once(events, "error").then(() => "error"),
    ]);
    ws.close();
    expect(first).toBe("error");
    await dispatcher.close();
    // The same upgrade written by hand, to read the answer the client got.
    const text = await rawUpgrade("api.openai.com", "/v1/realtime", `Bearer ${ph}`, {
      "proxy-authorization": proxyAuth("visitor", TOKENS.KB_GUEST_TOKEN),
    });
    expect(brokerError(text)).toMatchObject({ status: 403, code: "policy_denied" });
    expect(brokerError(text).message).toContain("guest");
    expect(text).not.toContain("101 Switching Protocols");
    expect(f.upstream.received.length).toBe(before);
    // The guest still reads.
    const res = await request("https://api.openai.com/v1/models", {
      dispatcher: clientAgent("visitor", TOKENS.KB_GUEST_TOKEN),
      headers: { authorization: `Bearer ${ph}` },
    });
    await res.body.dump();
    expect(res.statusCode).toBe(200);
  });

  it("a user client's upgrade still gets 101 and its frames", async () => {
    const ph = await clientPlaceholder("worker");
    const dispatcher = clientAgent("worker", TOKENS.KB_WORKER_TOKEN);
    const before = f.upstream.received.length;
    const ws = new WebSocket("wss://api.openai.com/v1/realtime", {
      dispatcher,
      headers: { authorization: `Bearer ${ph}` },
    });
    expect(await firstMessage(ws)).toBe("hello from upstream");
    expect(f.upstream.received.length).toBe(before + 1);
    expect(f.upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    ws.close();
    await dispatcher.close();
  });
});
