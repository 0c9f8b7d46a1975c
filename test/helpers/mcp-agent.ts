// The two people of the MCP tests, around the fake server of fake-mcp.ts: the agent, whose MCP
// client is the official SDK's Client with no auth provider (as an agent configures it behind
// keybroker), and the user, who runs `keybroker auth add` and approves in a browser.
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Agent, type ProxyAgent, fetch as undiciFetch } from "undici";
import { expect } from "vitest";
import { baseEnv, CLI, commandSource, keepOutput } from "./broker.js";
import type { FakeMcp } from "./fake-mcp.js";

/** What the agent's client saw of each answer (the SDK hides the headers of a refusal). */
export interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly body?: string;
}

/** The SDK client as an agent configures it: a URL, no auth provider, and a junk Authorization. */
export async function agentClient(
  url: string,
  via?: ProxyAgent,
): Promise<{ client: Client; transport: StreamableHTTPClientTransport; answers: Answer[] }> {
  const answers: Answer[] = [];
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { authorization: "Bearer agent-has-no-token" } },
    fetch: async (input, init) => {
      const res = (await undiciFetch(String(input), {
        ...(init as object),
        ...(via === undefined ? {} : { dispatcher: via }),
      })) as unknown as Response;
      answers.push({
        status: res.status,
        headers: res.headers,
        ...(res.status >= 400 ? { body: await res.clone().text() } : {}),
      });
      return res;
    },
  });
  const client = new Client({ name: "agent", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport, answers };
}

/** An SDK client, with no auth provider, that cannot connect: every answer it got. */
export async function refusedConnect(url: string): Promise<Answer[]> {
  const answers: Answer[] = [];
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: async (input, init) => {
      const res = (await undiciFetch(String(input), init as object)) as unknown as Response;
      answers.push({ status: res.status, headers: res.headers, body: await res.clone().text() });
      return res;
    },
  });
  await expect(new Client({ name: "agent", version: "1" }).connect(transport)).rejects.toThrow();
  return answers;
}

/** `keybroker auth add <provider>` in `home`, with the test as the user's browser. */
export async function mcpAuthAdd(
  fake: FakeMcp,
  o: { home: string; config: string; port: number; provider?: string; env?: Record<string, string> },
): Promise<{ code: number | null; out: string; err: string }> {
  const args = ["auth", "add", o.provider ?? "notes", "--no-browser", "--port", String(o.port)];
  const child: ChildProcess = spawn(
    process.execPath,
    [CLI, ...args, "--home", o.home, "--config", o.config],
    {
      env: baseEnv(o.env),
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let out = "";
  let err = "";
  child.stderr!.on("data", (d: Buffer) => {
    err += d.toString();
  });
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /open: (\S+)/.exec(out);
      if (m !== null) resolve(m[1]!);
    });
    child.once("close", () => reject(new Error(`auth add ended early:\n${out}\n${err}`)));
  });
  const closed = once(child, "close");
  // The browser: reaches the authorization server at its address, then the loopback callback.
  const browser = new Agent({
    connect: {
      ca: readFileSync(fake.caPath, "utf8"),
      lookup: (_h, _o, cb) => cb(null, [{ address: "127.0.0.1", family: 4 }]),
    },
  });
  const authorize = new URL(url);
  authorize.port = String(fake.port);
  const res = await undiciFetch(authorize, { dispatcher: browser, redirect: "manual" });
  const callback = res.headers.get("location");
  expect(res.status, await res.text()).toBe(302);
  await (await undiciFetch(callback!)).text();
  await browser.close();
  const [code] = (await closed) as [number | null];
  keepOutput(commandSource(process.execPath, [CLI, ...args]), out, err);
  return { code, out, err };
}
