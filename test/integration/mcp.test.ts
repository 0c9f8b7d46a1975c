// MCP servers behind keybroker (docs/spec.md §15), end to end with the official SDK on both sides: the
// fake server is the SDK's McpServer on its Streamable HTTP transport behind its bearer check,
// its authorization server the SDK's auth router. `keybroker auth add` discovers and registers
// and logs in as a user would drive it; then the SDK's own Client, with no auth provider and a
// junk Authorization header, works through the mount and through the proxy to the real URL,
// streams progress, gets the standalone GET stream, and ends its session; once the grant is
// revoked it gets keybroker's 401 reauth_required, never the server's challenge.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { ProxyAgent, fetch as undiciFetch } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminRequest, csrfOf, sessionOf } from "../helpers/admin-http.js";
import {
  type BrokerProcess,
  cliAsync,
  findSecrets,
  outputs,
  startBroker,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { freePort } from "../helpers/cli-session.js";
import { AS_HOST, type FakeMcp, MCP_URL, mcpRules, startFakeMcp } from "../helpers/fake-mcp.js";
import { agentClient, mcpAuthAdd, refusedConnect } from "../helpers/mcp-agent.js";

let fake: FakeMcp;
let broker: BrokerProcess;
let home: string;
let config: string;
let dir: string;

/** `keybroker auth add notes`, with the test as the user's browser. */
const login = (port: number) => mcpAuthAdd(fake, { home, config, port });

beforeAll(async () => {
  fake = await startFakeMcp();
  home = tempHome();
  dir = tempHome();
  config = writeConfig(dir, mcpRules(fake));
  broker = await startBroker({ home, config });
}, 60_000);

afterAll(async () => {
  await broker?.stop();
  await fake?.close();
  const store = join(home, "tokens");
  expect(fake.issued.length).toBeGreaterThan(0);
  expect(findSecrets(fake.issued, [home, dir], outputs, (file) => file.startsWith(store))).toEqual([]);
});

describe("an MCP server behind keybroker", () => {
  it("answers 401 reauth_required before any login, and the agent never reaches the authorization server", async () => {
    const mount = `${broker.url}/p/notes/mcp`;
    const answers = await refusedConnect(mount);
    expect(answers).toHaveLength(1);
    const [a] = answers;
    expect(a!.status).toBe(401);
    expect(a!.headers.get("www-authenticate")).toBeNull();
    expect(a!.headers.get("x-keybroker-error")).toBe("reauth_required");
    expect(JSON.parse(a!.body!).error).toMatchObject({
      type: "reauth_required",
      hint: "keybroker auth add notes",
    });
    // The metadata is not served to the agent either.
    const meta = await undiciFetch(`${broker.url}/p/notes/.well-known/oauth-protected-resource/mcp`);
    expect(meta.status).toBe(403);
    expect(await meta.text()).not.toContain(AS_HOST);
    expect(fake.asSeen).toEqual([]);
    expect(fake.mcpSeen).toEqual([]);
  });

  it("logs in with discovery, dynamic registration, PKCE and the resource indicator", async () => {
    const port = await freePort();
    const r = await login(port);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toContain('notes: logged in as credential "default"');
    expect(r.out).toContain(`Registered keybroker as a client of https://${AS_HOST}`);
    // Discovery followed the server's challenge to its path-aware resource metadata.
    expect(fake.mcpSeen.map((s) => `${s.method} ${s.path}`)).toEqual([
      "POST /mcp",
      "GET /.well-known/oauth-protected-resource/mcp",
    ]);
    const registered = fake.asSeen.filter((s) => s.method === "POST" && s.path === "/register");
    expect(registered.map((s) => s.body)).toEqual([
      expect.objectContaining({
        application_type: "native",
        token_endpoint_auth_method: "none",
        redirect_uris: [`http://127.0.0.1:${port}/callback`],
      }),
    ]);
    expect(fake.resources).toEqual([
      { step: "authorize", resource: MCP_URL },
      { step: "code", resource: MCP_URL },
    ]);
    const authorize = fake.asSeen.find((s) => s.path.startsWith("/authorize"))!;
    const q = new URL(authorize.path, "https://x").searchParams;
    expect(q.get("scope")).toBe("notes offline_access");
    expect(q.get("code_challenge_method")).toBe("S256");
    expect(q.get("resource")).toBe(MCP_URL);
    const status = await cliAsync(["auth", "list", "--home", home, "--config", config]);
    expect(status.stdout).toContain(`MCP server ${MCP_URL}`);
    expect(status.stdout).toMatch(/default/);
    const check = await cliAsync(["check", "--home", home, "--config", config]);
    expect(check.stdout).toContain(`notes: 1 OAuth login (MCP server ${MCP_URL})`);
  }, 60_000);

  it("serves the SDK client through the mount: tools, streamed progress, the GET stream, DELETE", async () => {
    fake.mcpSeen.length = 0;
    const mount = `${broker.url}/p/notes/mcp`;
    // The broker follows the token store: wait until it serves the new login.
    const deadline = Date.now() + 10_000;
    let agent: Awaited<ReturnType<typeof agentClient>> | undefined;
    while (agent === undefined) {
      try {
        agent = await agentClient(mount);
      } catch (err) {
        if (Date.now() > deadline) throw err;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    const { client, transport } = agent;
    const changed = new Promise<void>((resolve) =>
      client.setNotificationHandler(ToolListChangedNotificationSchema, async () => resolve()),
    );
    const tools = await client.listTools();
    expect(tools.tools.map((t) => t.name).sort()).toEqual(["announce", "echo", "progress"]);
    expect(await client.callTool({ name: "echo", arguments: { text: "hi" } })).toMatchObject({
      content: [{ type: "text", text: "echo: hi" }],
    });

    // Each progress step waits for the client to have seen the previous one: a buffered SSE
    // answer would stall the tool ("stalled at step 1").
    const events: string[] = [];
    const seen = new Map<number, () => void>();
    const gates = new Map<number, Promise<void>>();
    for (const step of [1, 2, 3]) gates.set(step, new Promise<void>((r) => seen.set(step, r)));
    fake.progressSeen = (step) => gates.get(step)!;
    const result = await client.callTool({ name: "progress", arguments: {} }, undefined, {
      onprogress: (p) => {
        events.push(`progress ${p.progress}/${p.total}`);
        seen.get(p.progress)?.();
      },
    });
    events.push(`result ${(result.content as { text: string }[])[0]!.text}`);
    expect(events).toEqual(["progress 1/3", "progress 2/3", "progress 3/3", "result counted to 3"]);

    // A server notification unrelated to any request comes on the standalone GET stream.
    await client.callTool({ name: "announce", arguments: {} });
    await changed;
    const sessionId = transport.sessionId;
    expect(sessionId).toBeTruthy();
    await transport.terminateSession();
    await client.close();

    const mcp = fake.mcpSeen.filter((s) => s.path === "/mcp");
    const methods = new Set(mcp.map((s) => s.method));
    expect(methods).toEqual(new Set(["POST", "GET", "DELETE"]));
    const stream = mcp.find((s) => s.method === "GET")!;
    expect(stream.headers.accept).toContain("text/event-stream");
    const del = mcp.find((s) => s.method === "DELETE")!;
    expect(del.headers["mcp-session-id"]).toBe(sessionId);
    for (const s of mcp) {
      const auth = String(s.headers.authorization);
      expect(auth).not.toContain("agent-has-no-token");
      expect(fake.issued).toContain(auth.replace(/^Bearer /, ""));
    }
    expect(mcp.filter((s) => s.headers["mcp-protocol-version"] !== undefined).length).toBeGreaterThan(0);
  }, 60_000);

  it("serves the SDK client at the real URL through the proxy", async () => {
    fake.mcpSeen.length = 0;
    const proxy = new ProxyAgent({
      uri: broker.url,
      requestTls: { ca: readFileSync(broker.caPath, "utf8") },
    });
    const { client } = await agentClient(MCP_URL, proxy);
    expect(await client.callTool({ name: "echo", arguments: { text: "via proxy" } })).toMatchObject({
      content: [{ type: "text", text: "echo: via proxy" }],
    });
    await client.close();
    await proxy.close();
    expect(fake.mcpSeen.length).toBeGreaterThan(0);
    for (const s of fake.mcpSeen) expect(fake.issued).toContain(String(s.headers.authorization).slice(7));
  });

  it("refreshes once after the server refuses the token, and sends the request again", async () => {
    fake.dropAccessTokens();
    fake.mcpSeen.length = 0;
    const before = fake.resources.length;
    const { client } = await agentClient(`${broker.url}/p/notes/mcp`);
    expect(await client.callTool({ name: "echo", arguments: { text: "again" } })).toMatchObject({
      content: [{ type: "text", text: "echo: again" }],
    });
    await client.close();
    expect(fake.resources.slice(before)).toEqual([{ step: "refresh", resource: MCP_URL }]);
    // The initialize was refused once, then sent again with the new token.
    const inits = fake.mcpSeen.filter(
      (s) => (s.body as { method?: string } | undefined)?.method === "initialize",
    );
    expect(inits).toHaveLength(2);
    expect(inits[0]!.headers.authorization).not.toBe(inits[1]!.headers.authorization);
  });

  it("keeps the server's challenge from the agent when the answer is too large to hold", async () => {
    for (const status of [401, 403]) {
      const res = await fetch(`${broker.url}/p/notes/big-challenge?status=${status}`);
      expect(res.status).toBe(status);
      expect(res.headers.get("www-authenticate")).toBeNull();
      expect((await res.text()).length).toBe(100 * 1024);
    }
  });

  it("after the grant is revoked, the agent gets 401 reauth_required and no challenge", async () => {
    const mount = `${broker.url}/p/notes/mcp`;
    fake.revokeAll();
    const asBefore = fake.asSeen.length;
    fake.mcpSeen.length = 0;
    const answers = await refusedConnect(mount);
    expect(answers.map((a) => a.status)).toEqual([401]);
    expect(answers[0]!.headers.get("www-authenticate")).toBeNull();
    expect(JSON.parse(answers[0]!.body!).error).toMatchObject({
      type: "reauth_required",
      hint: "keybroker auth add notes",
    });
    // keybroker refreshed once (refused); nobody started a login, registered, or read metadata.
    const after = fake.asSeen.slice(asBefore).map((s) => `${s.method} ${s.path}`);
    expect(after).toEqual(["POST /token"]);
    expect((fake.asSeen.at(-1)!.body as Record<string, string>).grant_type).toBe("refresh_token");
    expect(fake.resources.at(-1)).toEqual({ step: "refresh", resource: MCP_URL });
    expect(fake.mcpSeen.every((s) => s.path === "/mcp")).toBe(true);
    const status = await cliAsync(["status", "--home", home, "--config", config]);
    expect(status.stdout).toContain("reauth_required");
  });

  it("the admin page removes the login: revoked at its server as the client it was made with, binding gone", async () => {
    const link = await cliAsync(["admin", "--home", home, "--config", config]);
    const url = new URL(/(http:\/\/127\.0\.0\.1:\d+\/admin\/login\?code=\S+)/.exec(link.stdout)![1]!);
    const port = Number(url.port);
    const login = await adminRequest(port, "/admin/login", undefined, {
      code: url.searchParams.get("code")!,
    });
    const cookie = sessionOf(login);
    expect(cookie, login.text).toBeDefined();
    const actions = await adminRequest(port, "/admin/actions", cookie);
    expect(actions.text).toContain("<option>notes/default</option>");
    const binding = join(home, "tokens", "mcp", "logins", "notes~default.json");
    expect(existsSync(binding)).toBe(true);
    const asBefore = fake.asSeen.length;
    const done = await adminRequest(port, "/admin/do/remove-login", cookie, {
      target: "notes/default",
      csrf: csrfOf(actions.text)!,
    });
    expect(done.status).toBe(303);
    const shown = await adminRequest(port, done.location!, cookie);
    expect(shown.text).toContain(
      "Removed the login notes/default and revoked it at the authorization server",
    );
    // Revoked at the MCP server's own authorization server, as the registered client.
    const revoked = fake.asSeen.slice(asBefore).filter((s) => s.path === "/revoke");
    expect(revoked).toHaveLength(1);
    const registered = fake.asSeen.find((s) => s.path === "/register");
    expect(revoked[0]!.body).toMatchObject({ token_type_hint: "refresh_token" });
    expect(registered).toBeDefined();
    expect(existsSync(binding)).toBe(false);
    const list = await cliAsync(["auth", "list", "--home", home, "--config", config]);
    expect(list.stdout).not.toMatch(/notes.*default/s);
  });
});
