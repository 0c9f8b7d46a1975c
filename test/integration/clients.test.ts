// Real clients, configured the way a user would configure them (the variables `keybroker env`
// prints: proxy, CA bundle, placeholders), talking through a real broker to a fake provider.
// Each one must get its answer, the provider must see the real key and no placeholder, and the
// client itself must never see the real key.

import type { IncomingMessage, ServerResponse } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type CliResult, ROOT, runProcess } from "../helpers/broker.js";
import { curlChatArgs } from "../helpers/curl.js";
import { REAL_ANTHROPIC, REAL_OPENAI } from "../helpers/fixture.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import type { Route } from "../helpers/upstream.js";

const CLIENTS = join(ROOT, "test/fixtures/clients");
const PYTHON = "/usr/bin/python3";
const CURL = "curl";

let f: InProcessFixture;
/** What `keybroker env --format json` printed: proxy, CA bundle and placeholder variables. */
let agentEnv: Record<string, string>;

beforeAll(async () => {
  f = await startInProcessFixture();
  const r = await f.cli(["env", "--format", "json"]);
  expect(r.status, r.stderr).toBe(0);
  agentEnv = JSON.parse(r.stdout) as Record<string, string>;
});

afterAll(async () => {
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

type Run = CliResult;

/** Runs a client to completion with exactly `env` on top of the clean base environment. */
async function run(command: string, args: string[], env: Record<string, string>): Promise<Run> {
  // The clients hold placeholders only: a real key in their environment would defeat the test.
  for (const value of Object.values(env)) {
    expect(value).not.toContain(REAL_OPENAI);
    expect(value).not.toContain(REAL_ANTHROPIC);
  }
  // What a client printed joins the broker's outputs in the final secret scan.
  return runProcess(command, args, { cwd: f.dir, env });
}

/** The client's last stdout line, a JSON summary its script printed. */
function summary(r: Run): { status: number; content?: string; chunks?: string[] } {
  expect(r.status, `exit ${r.status}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`).toBe(0);
  const last = r.stdout.trim().split("\n").at(-1) ?? "";
  return JSON.parse(last);
}

function placeholders(): string[] {
  return [agentEnv.OPENAI_API_KEY!, agentEnv.ANTHROPIC_API_KEY!];
}

/** Runs `client` and checks the provider received exactly one request, with the real key only. */
async function expectOneRequest<T extends Run>(client: () => Promise<T>) {
  const before = f.upstream.received.length;
  const r = await client();
  expect(f.upstream.received.length, r.stderr).toBe(before + 1);
  const got = f.upstream.received.at(-1)!;
  const raw = JSON.stringify(got.rawHeaders);
  for (const ph of placeholders()) expect(raw).not.toContain(ph);
  // The client never learns the real keys: not in what it printed, whatever it printed.
  for (const real of [REAL_OPENAI, REAL_ANTHROPIC]) {
    expect(r.stdout).not.toContain(real);
    expect(r.stderr).not.toContain(real);
  }
  return { r, got };
}

describe("real clients through the broker", () => {
  it("has the variables a user would get", () => {
    expect(agentEnv.HTTPS_PROXY).toBe(f.broker.url);
    expect(agentEnv.SSL_CERT_FILE).toBe(f.broker.bundlePath);
    expect(agentEnv.REQUESTS_CA_BUNDLE).toBe(f.broker.bundlePath);
    expect(agentEnv.CURL_CA_BUNDLE).toBe(f.broker.bundlePath);
    expect(agentEnv.NODE_EXTRA_CA_CERTS).toBe(f.broker.bundlePath);
    for (const ph of placeholders()) {
      expect(ph).toBeTruthy();
      expect(ph).not.toBe(REAL_OPENAI);
      expect(ph).not.toBe(REAL_ANTHROPIC);
    }
  });

  it("curl", async () => {
    const { r, got } = await expectOneRequest(() =>
      run(CURL, curlChatArgs(agentEnv.OPENAI_API_KEY!), {
        HTTPS_PROXY: agentEnv.HTTPS_PROXY!,
        CURL_CA_BUNDLE: agentEnv.CURL_CA_BUNDLE!,
      }),
    );
    expect(r.status, r.stderr).toBe(0);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines.at(-1)).toBe("200");
    const body = JSON.parse(lines.slice(0, -1).join("\n"));
    expect(body.choices[0].message.content).toBe("hello from upstream");
    expect(got.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    expect(got.host).toBe("api.openai.com");
    expect(got.sni).toBe("api.openai.com");
  });

  it("python requests", async () => {
    const { r, got } = await expectOneRequest(() =>
      run(PYTHON, [join(CLIENTS, "requests-chat.py")], agentEnv),
    );
    expect(summary(r)).toEqual({ status: 200, content: "hello from upstream" });
    expect(got.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    expect(got.host).toBe("api.openai.com");
  });

  it("python httpx with strict X.509 verification", async () => {
    const { r, got } = await expectOneRequest(() => run(PYTHON, [join(CLIENTS, "httpx-chat.py")], agentEnv));
    expect(summary(r)).toEqual({ status: 200, content: "hello from upstream" });
    expect(got.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    expect(got.host).toBe("api.openai.com");
  });

  it("the openai SDK in a child node process", async () => {
    const { r, got } = await expectOneRequest(() =>
      run(process.execPath, [join(CLIENTS, "openai-chat.mjs")], agentEnv),
    );
    expect(summary(r)).toEqual({ status: 200, content: "hello from upstream" });
    expect(got.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    expect(got.host).toBe("api.openai.com");
  });

  it("the anthropic SDK in a child node process", async () => {
    const { r, got } = await expectOneRequest(() =>
      run(process.execPath, [join(CLIENTS, "anthropic-messages.mjs")], agentEnv),
    );
    expect(summary(r)).toEqual({ status: 200, content: "hello from upstream" });
    // Older SDKs send the key as x-api-key; @anthropic-ai/sdk 1.x sends `Authorization: Bearer`.
    // The broker injects into either: whichever the SDK sent must carry the real key.
    const sent = [got.headers["x-api-key"], got.headers.authorization]
      .filter((v) => v !== undefined)
      .map((v) => String(v).replace(/^Bearer /, ""));
    expect(sent.length).toBeGreaterThan(0);
    for (const value of sent) expect(value).toBe(REAL_ANTHROPIC);
    expect(got.host).toBe("api.anthropic.com");
  });

  it("the openai SDK streaming (SSE): every chunk arrives, in order", async () => {
    const parts = ["Hel", "lo ", "from ", "the ", "stream", "!"];
    const route = "POST /v1/chat/completions";
    const original = f.upstream.routes.get(route)!;
    const sse: Route = (req: IncomingMessage, res: ServerResponse, body: Buffer) => {
      if (JSON.parse(body.toString() || "{}").stream !== true) return original(req, res, body);
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      const chunk = (delta: object, finish: string | null) =>
        `data: ${JSON.stringify({
          id: "chatcmpl-stream",
          object: "chat.completion.chunk",
          created: 1_700_000_000,
          model: "gpt-test",
          choices: [{ index: 0, delta, finish_reason: finish }],
        })}\n\n`;
      res.write(chunk({ role: "assistant", content: "" }, null));
      for (const content of parts) res.write(chunk({ content }, null));
      res.write(chunk({}, "stop"));
      res.end("data: [DONE]\n\n");
    };
    f.upstream.routes.set(route, sse);
    try {
      const { r, got } = await expectOneRequest(() =>
        run(process.execPath, [join(CLIENTS, "openai-chat.mjs"), "--stream"], agentEnv),
      );
      expect(summary(r)).toEqual({ status: 200, chunks: parts });
      expect(got.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
      expect(JSON.parse(got.body.toString()).stream).toBe(true);
    } finally {
      f.upstream.routes.set(route, original);
    }
  });
});
