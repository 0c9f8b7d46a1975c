// Service-account providers behind the loopback endpoint (docs/spec.md §9): a Google service account
// exchanged for an access token at a fake token endpoint that checks the JWT's RS256 signature,
// and AWS SigV4 checked by a fake Bedrock with the maintained signer. Real SDKs on the client
// side, with dummy keys only.

import { generateKeyPairSync, verify } from "node:crypto";
import { writeFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { join } from "node:path";
import { BedrockRuntimeClient, ConverseCommand } from "@aws-sdk/client-bedrock-runtime";
import { Hash } from "@smithy/hash-node";
import { NodeHttpHandler } from "@smithy/node-http-handler";
import { SignatureV4 } from "@smithy/signature-v4";
import OpenAI from "openai";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { outputs, tempHome } from "../helpers/broker.js";
import { HOSTS } from "../helpers/fixture.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import type { FakeUpstream } from "../helpers/upstream.js";

const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
const PRIVATE_PEM = privateKey.export({ type: "pkcs8", format: "pem" }).toString();
const EMAIL = "kb-test@project.iam.gserviceaccount.com";
const AWS_ID = "AKIAKEYBROKERTEST001";
const AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYkeybrokerKEY";

const SA_HOSTS = [
  "oauth2.googleapis.com",
  "us-central1-aiplatform.googleapis.com",
  "bedrock-runtime.us-east-1.amazonaws.com",
];

function keyFile(): string {
  const dir = tempHome();
  const path = join(dir, "sa.json");
  const key = {
    type: "service_account",
    client_email: EMAIL,
    private_key: PRIVATE_PEM,
    private_key_id: "kid-1",
    token_uri: "https://oauth2.googleapis.com/token",
  };
  writeFileSync(path, JSON.stringify(key), { mode: 0o600 });
  return path;
}

function rules(u: FakeUpstream, keyPath: string, extra = ""): string {
  const resolve = [...HOSTS, ...SA_HOSTS].map((h) => `  "${h}:443": "127.0.0.1:${u.port}"`).join("\n");
  return `version: 1
upstream_ca: [${JSON.stringify(u.caPath)}]
resolve:
${resolve}
providers:
  vertex:
    mount: /p/vertex
    upstream: https://us-central1-aiplatform.googleapis.com
    hosts: [us-central1-aiplatform.googleapis.com]
    auth: { google_service_account: ${JSON.stringify(`file:${keyPath}`)}, token_timeout: 2s }
  bedrock:
    mount: /p/bedrock
    upstream: https://bedrock-runtime.us-east-1.amazonaws.com
    auth:
      aws_sigv4: { region: us-east-1, service: bedrock, access_key_id: BEDROCK_KEY_ID, secret_access_key: BEDROCK_SECRET }
${extra}`;
}

function b64json(part: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(part, "base64url").toString()) as Record<string, unknown>;
}

interface FakeGoogle {
  exchanges: number;
  valid: Set<string>;
  expiresIn: number;
  mode: "ok" | "down" | "slow" | "huge";
}

/** A token endpoint that verifies the JWT-bearer assertion against the key's public half. */
function fakeGoogle(u: FakeUpstream): FakeGoogle {
  const g: FakeGoogle = { exchanges: 0, valid: new Set(), expiresIn: 3600, mode: "ok" };
  u.routes.set("POST /token", (_req: IncomingMessage, res: ServerResponse, body: Buffer) => {
    if (g.mode === "down") {
      res.writeHead(503).end("unavailable");
      return;
    }
    if (g.mode === "slow") return; // never answers
    if (g.mode === "huge") {
      res.writeHead(200, { "content-type": "application/json" });
      const chunk = Buffer.alloc(1024 * 1024, 0x20);
      let sent = 0;
      const pump = () => {
        while (sent < 50 && res.write(chunk)) sent++;
        if (sent < 50) res.once("drain", pump);
        else res.end();
      };
      res.on("error", () => {});
      pump();
      return;
    }
    const form = new URLSearchParams(body.toString());
    const [h, c, s] = (form.get("assertion") ?? "").split(".");
    const ok =
      form.get("grant_type") === "urn:ietf:params:oauth:grant-type:jwt-bearer" &&
      verify("RSA-SHA256", Buffer.from(`${h}.${c}`), publicKey, Buffer.from(s ?? "", "base64url"));
    const claims = ok ? b64json(c!) : {};
    const header = ok ? b64json(h!) : {};
    const now = Date.now() / 1000;
    if (
      !ok ||
      header.alg !== "RS256" ||
      header.kid !== "kid-1" ||
      claims.iss !== EMAIL ||
      claims.aud !== "https://oauth2.googleapis.com/token" ||
      claims.scope !== "https://www.googleapis.com/auth/cloud-platform" ||
      typeof claims.exp !== "number" ||
      claims.exp < now
    ) {
      res.writeHead(400, { "content-type": "application/json" }).end('{"error":"invalid_grant"}');
      return;
    }
    g.exchanges++;
    const token = `ya29.test-token-${g.exchanges}-${"x".repeat(20)}`;
    g.valid.add(token);
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ access_token: token, expires_in: g.expiresIn, token_type: "Bearer" }));
  });
  const chat = "POST /v1/projects/p1/locations/us-central1/endpoints/openapi/chat/completions";
  u.routes.set(chat, (req: IncomingMessage, res: ServerResponse) => {
    const token = String(req.headers.authorization ?? "").replace(/^Bearer /, "");
    if (!g.valid.has(token)) {
      res
        .writeHead(401, { "content-type": "application/json" })
        .end('{"error":{"code":401,"status":"UNAUTHENTICATED"}}');
      return;
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        id: "v1",
        object: "chat.completion",
        created: 1,
        model: "google/gemini-test",
        choices: [
          { index: 0, message: { role: "assistant", content: "hello from vertex" }, finish_reason: "stop" },
        ],
      }),
    );
  });
  return g;
}

/** A Bedrock Converse endpoint that checks the SigV4 signature by re-signing with the known key. */
function fakeBedrock(u: FakeUpstream): { calls: number; rejected: number } {
  const state = { calls: 0, rejected: 0 };
  u.routes.set(
    "POST /model/anthropic.claude-test/converse",
    async (req: IncomingMessage, res: ServerResponse, body: Buffer) => {
      state.calls++;
      const auth = String(req.headers.authorization ?? "");
      const m =
        /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, SignedHeaders=([^,]+), Signature=([0-9a-f]+)$/.exec(
          auth,
        );
      let good = false;
      if (m && m[1] === AWS_ID && m[3] === "us-east-1" && m[4] === "bedrock") {
        const signed = m[5]!.split(";");
        const headers: Record<string, string> = {};
        for (const name of signed) headers[name] = String(req.headers[name] ?? "");
        const amzDate = String(req.headers["x-amz-date"]);
        const date = new Date(
          `${amzDate.slice(0, 4)}-${amzDate.slice(4, 6)}-${amzDate.slice(6, 8)}T${amzDate.slice(9, 11)}:${amzDate.slice(11, 13)}:${amzDate.slice(13, 15)}Z`,
        );
        const verifier = new SignatureV4({
          credentials: { accessKeyId: AWS_ID, secretAccessKey: AWS_SECRET },
          region: "us-east-1",
          service: "bedrock",
          sha256: Hash.bind(null, "sha256"),
        });
        const again = await verifier.sign(
          {
            method: req.method ?? "POST",
            protocol: "https:",
            hostname: String(req.headers.host),
            path: req.url!.split("?")[0]!,
            query: {},
            headers,
            body,
          },
          { signingDate: date },
        );
        good = String(again.headers.authorization).endsWith(`Signature=${m[6]}`);
      }
      if (!good) {
        state.rejected++;
        res.writeHead(403, {
          "content-type": "application/json",
          "x-amzn-errortype": "InvalidSignatureException",
        });
        res.end(
          JSON.stringify({
            message: "The request signature we calculated does not match the signature you provided.",
          }),
        );
        return;
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          output: { message: { role: "assistant", content: [{ text: "hello from bedrock" }] } },
          stopReason: "end_turn",
          usage: { inputTokens: 1, outputTokens: 3, totalTokens: 4 },
          metrics: { latencyMs: 1 },
        }),
      );
    },
  );
  return state;
}

const open: InProcessFixture[] = [];
afterEach(async () => {
  for (const f of open.splice(0)) {
    await f.close();
    expect(f.leaks()).toEqual([]);
    expect(outputs.some((o) => o.includes("PRIVATE KEY") || o.includes(AWS_SECRET))).toBe(false);
  }
});

async function fixture(
  secret = AWS_SECRET,
  extra = "",
): Promise<InProcessFixture & { google: FakeGoogle; bedrock: { calls: number; rejected: number } }> {
  const path = keyFile();
  let google!: FakeGoogle;
  let bedrock!: { calls: number; rejected: number };
  const f = await startInProcessFixture({
    rules: (u) => {
      google = fakeGoogle(u);
      bedrock = fakeBedrock(u);
      return rules(u, path, extra);
    },
    env: { BEDROCK_KEY_ID: AWS_ID, BEDROCK_SECRET: secret },
  });
  open.push(f);
  return Object.assign(f, { google, bedrock });
}

function vertexClient(f: InProcessFixture): OpenAI {
  return new OpenAI({
    apiKey: "unused",
    baseURL: `${f.broker.url}/p/vertex/v1/projects/p1/locations/us-central1/endpoints/openapi`,
    maxRetries: 0,
  });
}

async function ask(client: OpenAI): Promise<string> {
  const r = await client.chat.completions.create({
    model: "google/gemini-test",
    messages: [{ role: "user", content: "hi" }],
  });
  return r.choices[0]!.message.content ?? "";
}

describe("Google service account (Vertex AI)", () => {
  it("mints a token from the key file and serves the official openai SDK at the mount", async () => {
    const f = await fixture();
    const client = vertexClient(f);
    expect(await ask(client)).toBe("hello from vertex");
    expect(await ask(client)).toBe("hello from vertex");
    expect(f.google.exchanges).toBe(1); // cached
    const got = f.upstream.received.at(-1)!;
    expect(got.host).toBe("us-central1-aiplatform.googleapis.com");
    expect(String(got.headers.authorization)).toMatch(/^Bearer ya29\.test-token-1-/);
    expect(Object.values(process.env).some((v) => v?.includes("PRIVATE KEY"))).toBe(false);
  });

  it("refreshes before expiry", async () => {
    const f = await fixture();
    f.google.expiresIn = 60; // inside the refresh margin: every request needs a new token
    const client = vertexClient(f);
    await ask(client);
    await ask(client);
    expect(f.google.exchanges).toBe(2);
  });

  it("on a 401 from the upstream mints a new token and retries once", async () => {
    const f = await fixture();
    const client = vertexClient(f);
    await ask(client);
    f.google.valid.clear(); // the upstream revokes every token it gave
    expect(await ask(client)).toBe("hello from vertex");
    expect(f.google.exchanges).toBe(2);
  });

  it.each([
    ["down", /answered 503/],
    ["slow", /did not answer within 2000 ms/],
    ["huge", /larger than 1048576 bytes/],
  ] as const)(
    "token endpoint %s → 503 credential_unavailable naming the account, broker healthy",
    async (mode, why) => {
      const f = await fixture();
      f.google.mode = mode;
      const res = await request(
        `${f.broker.url}/p/vertex/v1/projects/p1/locations/us-central1/endpoints/openapi/chat/completions`,
        {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: "{}",
        },
      );
      expect(res.statusCode).toBe(503);
      const body = (await res.body.json()) as { error: { type: string; message: string } };
      expect(body.error.type).toBe("credential_unavailable");
      expect(body.error.message).toContain(EMAIL);
      expect(body.error.message).toMatch(why);
      expect(body.error.message).not.toContain("PRIVATE");
      // The broker still serves everyone else.
      const other = await request(`${f.broker.url}/p/openai/v1/chat/completions`, {
        method: "POST",
        body: "{}",
      });
      expect(other.statusCode).toBe(200);
      await other.body.text();
    },
  );

  it("signs intercepted requests too, for a client that sends its placeholder", async () => {
    const f = await fixture();
    const ph = f.placeholders().VERTEX_API_KEY!;
    expect(ph).toBeDefined();
    const agent = f.proxyAgent();
    const res = await request(
      "https://us-central1-aiplatform.googleapis.com/v1/projects/p1/locations/us-central1/endpoints/openapi/chat/completions",
      {
        method: "POST",
        dispatcher: agent,
        headers: { authorization: `Bearer ${ph}`, "content-type": "application/json" },
        body: "{}",
      },
    );
    expect(res.statusCode).toBe(200);
    await res.body.text();
    await agent.close();
  });
});

/** The official Bedrock runtime SDK, pointed at the broker's /p/bedrock mount. */
function bedrockClient(f: InProcessFixture): BedrockRuntimeClient {
  return new BedrockRuntimeClient({
    region: "us-east-1",
    endpoint: `${f.broker.url}/p/bedrock`,
    credentials: { accessKeyId: "dummy", secretAccessKey: "dummy" },
    maxAttempts: 1,
    // The Bedrock runtime client speaks HTTP/2 by default; the loopback endpoint is HTTP/1.1.
    requestHandler: new NodeHttpHandler(),
  });
}

describe("AWS SigV4 (Bedrock)", () => {
  it("re-signs the official Bedrock SDK's request with the real key pair", async () => {
    const f = await fixture();
    const client = bedrockClient(f);
    const out = await client.send(
      new ConverseCommand({
        modelId: "anthropic.claude-test",
        messages: [{ role: "user", content: [{ text: "hi" }] }],
      }),
    );
    expect(out.output?.message?.content?.[0]?.text).toBe("hello from bedrock");
    expect(f.bedrock.rejected).toBe(0);
    const got = f.upstream.received.at(-1)!;
    expect(String(got.headers.authorization)).toContain(`Credential=${AWS_ID}/`);
    expect(String(got.headers.authorization)).not.toContain("dummy");
    client.destroy();
  });

  it("is rejected upstream when the broker holds the wrong secret", async () => {
    const f = await fixture("wrong-secret-wrong-secret-wrong-secret00");
    const client = bedrockClient(f);
    await expect(
      client.send(
        new ConverseCommand({
          modelId: "anthropic.claude-test",
          messages: [{ role: "user", content: [{ text: "hi" }] }],
        }),
      ),
    ).rejects.toThrow(/signature/i);
    expect(f.bedrock.rejected).toBe(1);
    client.destroy();
  });
});
