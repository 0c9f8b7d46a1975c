// docs/spec.md §19 with Codex's ChatGPT sign-in, from the embedded catalogue's codex-oauth (no
// provider in the rule file): the agent's own sign-in through keybroker is forwarded and
// stored, the agent gets phantoms only (a JWT's keeps its claims and exp); a phantom refresh is
// answered at home, one real refresh at most however many agents refresh; the phantom access
// token works on chatgpt.com only; the id-token exchange gets the real id token in its form body;
// a logout is answered locally; a WebSocket upgrade refused with 401 refreshes the login (§8).
// Every answer the client saw is scanned for every real token.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { type ProxyAgent, request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { jwtPayload } from "../../secrets/oauth/phantoms.js";
import { FileTokenStore } from "../../state/tokens/home.js";
import { responsesSocket } from "../helpers/fake-llm.js";
import {
  ACCOUNT_ID,
  CLIENT_IDS,
  type FakeVendor,
  installVendor,
  subscriptionRules,
} from "../helpers/fake-subscriptions.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { oauthLeaks } from "../helpers/oauth-leaks.js";
import { openTunnel } from "../helpers/tunnel.js";

const open: { f: InProcessFixture; fake: FakeVendor; seen: string[] }[] = [];
afterEach(async () => {
  for (const { f, fake, seen } of open.splice(0)) {
    await f.close();
    expect(oauthLeaks(f, fake.issued)).toEqual([]);
    for (const text of seen) for (const t of fake.issued) expect(text).not.toContain(t);
    expect(fake.phantomsSeen).toBe(0);
  }
});

async function setup(extra = "") {
  let fake!: FakeVendor;
  const f = await startInProcessFixture({
    rules: (u) => {
      fake = installVendor(u, "codex");
      return subscriptionRules(u, extra);
    },
  });
  const seen: string[] = [];
  open.push({ f, fake, seen });
  const agent = f.proxyAgent();
  const post = async (
    url: string,
    body: string,
    type: string,
    headers: Record<string, string> = {},
    via: ProxyAgent = agent,
  ) => {
    const res = await request(url, {
      method: "POST",
      dispatcher: via,
      headers: { "content-type": type, ...headers },
      body,
    });
    const text = await res.body.text();
    seen.push(text);
    return { status: res.statusCode, text, json: () => JSON.parse(text) as Record<string, string> };
  };
  const token = (body: Record<string, string>) =>
    post(
      "https://auth.openai.com/oauth/token",
      JSON.stringify({ client_id: CLIENT_IDS.codex, ...body }),
      "application/json",
    );
  const signIn = () =>
    post(
      "https://auth.openai.com/oauth/token",
      new URLSearchParams({
        grant_type: "authorization_code",
        code: fake.code(),
        client_id: CLIENT_IDS.codex,
        redirect_uri: "http://localhost:1455/auth/callback",
        code_verifier: "v".repeat(43),
      }).toString(),
      "application/x-www-form-urlencoded",
    );
  const codex = (access: string) =>
    post("https://chatgpt.com/backend-api/codex/responses", "{}", "application/json", {
      authorization: `Bearer ${access}`,
      "chatgpt-account-id": ACCOUNT_ID,
    });
  /** Codex's WebSocket upgrade to its Responses backend, with `access`: the answer's head. */
  const upgrade = async (access: string) => {
    const tls = await openTunnel(f.broker, "chatgpt.com");
    tls.write(
      "GET /backend-api/codex/responses HTTP/1.1\r\nHost: chatgpt.com\r\nConnection: Upgrade\r\n" +
        "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
        `Authorization: Bearer ${access}\r\nChatGPT-Account-Id: ${ACCOUNT_ID}\r\n\r\n`,
    );
    let head = "";
    for await (const chunk of tls) {
      head += String(chunk);
      if (head.includes("\r\n\r\n")) break;
    }
    tls.destroy();
    seen.push(head);
    return head;
  };
  return { f, fake, agent, post, token, signIn, codex, upgrade, store: new FileTokenStore(f.home) };
}

describe("phantom tokens for Codex's ChatGPT sign-in", () => {
  it("a sign-in through keybroker is stored; the agent holds phantoms that keep the claims it reads", async () => {
    const { fake, signIn, codex, store, post, agent } = await setup();
    const answer = await signIn();
    expect(answer.status).toBe(200);
    const t = answer.json();
    const login = (await store.get("codex-oauth", "default"))!;
    expect(login.accessToken).toBe(fake.issued[0]);
    expect(login.account).toBe(ACCOUNT_ID);
    for (const field of ["access_token", "id_token"]) {
      const real = field === "id_token" ? login.idToken! : login.accessToken;
      expect(t[field]).not.toBe(real);
      // Header claims and payload kept (Codex reads the account, plan and exp), signed by keybroker.
      expect(jwtPayload(t[field]!)).toEqual(jwtPayload(real));
      const head = JSON.parse(Buffer.from(t[field]!.split(".")[0]!, "base64url").toString()) as Record<
        string,
        string
      >;
      expect(head).toMatchObject({ alg: "HS256", typ: "JWT", kid: "fake-1" });
    }
    expect(t.refresh_token).toContain("kbph_");
    // The phantom works toward chatgpt.com, swapped for the real token; the echo comes back scrubbed.
    const used = await codex(t.access_token!);
    expect(used.status).toBe(200);
    expect(used.json().echo).toBe(t.access_token);
    expect(fake.backend).toEqual([200]);
    // Toward any other intercepted host it is blocked before a byte leaves.
    const elsewhere = await post("https://api.openai.com/v1/responses", "{}", "application/json", {
      authorization: `Bearer ${t.access_token}`,
    });
    expect(elsewhere.status).toBe(403);
    expect(elsewhere.text).toContain("placeholder_host_mismatch");
    await agent.close();
  }, 60_000);

  it("refreshes with a phantom are answered at home: one real refresh for many agents, zero reuse, old phantoms keep working", async () => {
    const { f, fake, signIn, token, codex, store } = await setup();
    fake.accessTtl = 2;
    const first = (await signIn()).json();
    fake.accessTtl = 3600;
    // keybroker's custody refreshes ahead of expiry by itself, once.
    await expect.poll(() => fake.refreshes, { timeout: 10_000 }).toBe(1);
    // Two Codex homes and a gateway, all holding the first phantoms, refresh at once.
    const agents = [f.proxyAgent(), f.proxyAgent(), f.proxyAgent()];
    const answers = await Promise.all(
      agents.map((a) =>
        request("https://auth.openai.com/oauth/token", {
          method: "POST",
          dispatcher: a,
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            client_id: CLIENT_IDS.codex,
            grant_type: "refresh_token",
            refresh_token: first.refresh_token,
            refresh_reason: "expired",
          }),
        }).then(async (r) => ({
          status: r.statusCode,
          body: JSON.parse(await r.body.text()) as Record<string, string>,
        })),
      ),
    );
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(jwtPayload(a.body.access_token!)?.exp).toBe(
        jwtPayload((await store.get("codex-oauth", "default"))!.accessToken)?.exp,
      );
    }
    expect(fake.refreshes).toBe(1);
    expect(fake.reuses).toBe(0);
    // Not due: a refresh after a 401 gets phantoms of the current token without a real refresh.
    expect(
      (await token({ grant_type: "refresh_token", refresh_token: answers[0]!.body.refresh_token! })).status,
    ).toBe(200);
    expect(fake.refreshes).toBe(1);
    // The phantom from before keybroker refreshed still stands for the login's current token.
    expect((await codex(first.access_token!)).status).toBe(200);
    for (const a of agents) await a.close();
  }, 60_000);

  it("a refresh with a real refresh token moves custody over; the id-token exchange and a logout work with phantoms", async () => {
    const { fake, token, post, store, codex } = await setup();
    const before = fake.login();
    const moved = await token({ grant_type: "refresh_token", refresh_token: before.refresh_token as string });
    expect(moved.status).toBe(200);
    expect(fake.refreshes).toBe(1);
    const t = moved.json();
    expect((await store.get("codex-oauth", "default"))?.refreshToken).not.toBe(before.refresh_token);
    expect((await codex(t.access_token!)).status).toBe(200);
    // Codex exchanges its id token for an API key in a form body: the real id token goes out.
    const exchanged = await post(
      "https://auth.openai.com/oauth/token",
      new URLSearchParams({
        grant_type: "urn:ietf:params:oauth:grant-type:token-exchange",
        client_id: CLIENT_IDS.codex,
        requested_token: "openai-api-key",
        subject_token: t.id_token!,
        subject_token_type: "urn:ietf:params:oauth:token-type:id_token",
      }).toString(),
      "application/x-www-form-urlencoded",
    );
    expect(exchanged.status).toBe(200);
    expect(exchanged.json().access_token).toContain("kbph_");
    // A logout with the phantom is answered here; the login stays.
    const out = await post(
      "https://auth.openai.com/oauth/revoke",
      JSON.stringify({
        token: t.refresh_token,
        token_type_hint: "refresh_token",
        client_id: CLIENT_IDS.codex,
      }),
      "application/json",
    );
    expect(out.status).toBe(200);
    expect((await store.get("codex-oauth", "default"))?.state).toBe("ok");
    expect((await codex(t.access_token!)).status).toBe(200);
    expect(fake.refreshes).toBe(1);
  }, 60_000);

  it("a WebSocket upgrade refused with 401 (a token the server revoked before its exp): the login is refreshed as after a refused request, not marked invalid; the next upgrade goes through", async () => {
    const { f, fake, signIn, upgrade } = await setup();
    fake.socket = (req, socket) => responsesSocket(req, socket, []);
    const t = (await signIn()).json();
    expect(await upgrade(t.access_token!)).toMatch(/^HTTP\/1\.1 101 /);
    fake.refuseAccess();
    // The refusal reaches Codex (an upgrade cannot be sent again); keybroker refreshes the login.
    expect(await upgrade(t.access_token!)).toMatch(/^HTTP\/1\.1 401 /);
    await expect.poll(() => fake.refreshes, { timeout: 10_000 }).toBe(1);
    const status = JSON.parse((await f.cli(["status", "--json"])).stdout) as {
      providers: { id: string; credentials: { state: string }[] }[];
    };
    expect(status.providers.find((p) => p.id === "codex-oauth")!.credentials[0]!.state).toBe("ok");
    // Codex connects again with the phantom it holds: the login's new token goes out.
    expect(await upgrade(t.access_token!)).toMatch(/^HTTP\/1\.1 101 /);
    expect(fake.refreshes).toBe(1);
    expect(fake.backend).toEqual([101, 401, 101]);
  }, 60_000);

  it("a request refused with 401 whose body streamed past keybroker (too large to send again): the login is refreshed, not marked; the next request goes through", async () => {
    const { f, fake, signIn, post } = await setup();
    const t = (await signIn()).json();
    fake.refuseAccess();
    const headers = { authorization: `Bearer ${t.access_token}`, "chatgpt-account-id": ACCOUNT_ID };
    const url = "https://chatgpt.com/backend-api/codex/responses";
    const big = JSON.stringify({ input: "x".repeat(200_000) });
    expect((await post(url, big, "application/json", headers)).status).toBe(401);
    expect(fake.refreshes).toBe(1);
    expect((await post(url, "{}", "application/json", headers)).status).toBe(200);
    const status = JSON.parse((await f.cli(["status", "--json"])).stdout) as {
      providers: { id: string; credentials: { state: string }[] }[];
    };
    expect(status.providers.find((p) => p.id === "codex-oauth")!.credentials[0]!.state).toBe("ok");
    expect(readFileSync(join(f.home, "audit/audit.jsonl"), "utf8")).not.toContain('"decision":"marked"');
    expect(fake.backend).toEqual([401, 200]);
  }, 60_000);

  it("a client that may not use codex-oauth gets no login and no phantom from a sign-in", async () => {
    const { fake, signIn, store } = await setup("clients:\n  default:\n    providers: [openai]\n");
    const refused = await signIn();
    expect(refused.status, refused.text).toBe(407);
    expect(refused.text).toContain("client_unauthorized");
    expect(await store.get("codex-oauth", "default")).toBeUndefined();
    expect(fake.issued).toEqual([]);
  }, 60_000);
});
