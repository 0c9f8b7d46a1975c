// Issue 28 with the real Codex CLI (test/agents, decision 145): a user who signs in with Codex's own
// browser sign-in while under `keybroker run --use codex-oauth -- codex login` ends with the login
// in keybroker's custody (docs/spec.md §19 "Capture", docs/subscriptions.md). Codex listens on its
// fixed loopback port (1455, else 1457), prints the authorization URL; the test is the browser: it
// opens that URL at the fake of auth.openai.com (fake-subscriptions.ts, which checks PKCE) and
// follows the redirect back to Codex. Codex then exchanges the code, and its id token for an API
// key, through keybroker: the real tokens are stored, Codex's auth.json gets phantoms only. A
// `codex exec` from that file then answers through keybroker with the real token. Then the fake
// stops taking that token mid-run: Codex's WebSocket gets 401, keybroker refreshes the login once
// (docs/spec.md §8) and Codex, connecting again, answers. Every file of the agent's home and
// everything printed is scanned for every real token.
import { once } from "node:events";
import { mkdirSync, readFileSync } from "node:fs";
import { type AddressInfo, createServer } from "node:net";
import { join } from "node:path";
import { Agent, request } from "undici";
import { afterAll, beforeAll, expect, it } from "vitest";
import { FileTokenStore } from "../../state/tokens/home.js";
import { CLI, findSecrets, homeArgs, outputs, ROOT, runProcess, tempHome } from "../helpers/broker.js";
import { type Running, startProcess } from "../helpers/cli-session.js";
import { ANSWERS, responses, responsesSocket, type SocketMessage } from "../helpers/fake-llm.js";
import {
  ACCOUNT_ID,
  authAddUrl,
  type FakeVendor,
  installVendor,
  subscriptionRules,
} from "../helpers/fake-subscriptions.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { oauthLeaks } from "../helpers/oauth-leaks.js";

const BIN = join(ROOT, "test/agents/node_modules/.bin");
/** Telemetry and update hosts Codex calls: led to a port that closes every connection. */
const ELSEWHERE = ["ab.chatgpt.com", "api.github.com", "github.com", "registry.npmjs.org"];
const PHANTOM = /kbph_|eyJrYmwiOi/;

const sink = createServer((socket) => socket.destroy());
let f: InProcessFixture;
let fake: FakeVendor;
const sockets: SocketMessage[] = [];
const dirs: string[] = [];
/** Codex's home, signed in by the first test. */
let home = "";
/** The authorization URL the real `codex login` printed in the first test. */
let codexAuthorize: URL | undefined;

beforeAll(async () => {
  sink.listen(0, "127.0.0.1");
  await once(sink, "listening");
  const sinkPort = (sink.address() as AddressInfo).port;
  f = await startInProcessFixture({
    rules: (u) => {
      fake = installVendor(u, "codex");
      return subscriptionRules(u, ELSEWHERE.map((h) => `  "${h}:443": "127.0.0.1:${sinkPort}"\n`).join(""));
    },
  });
  fake.answers.set("POST /backend-api/codex/responses", responses);
  fake.socket = (req, socket) => responsesSocket(req, socket, sockets);
});

afterAll(async () => {
  if (f === undefined) return;
  await f.close();
  sink.close();
  expect(oauthLeaks(f, fake.issued)).toEqual([]);
  expect(findSecrets(fake.issued, dirs, outputs)).toEqual([]);
}, 60_000);

/** `keybroker run --use codex-oauth -- codex <args>` in the agent's own folders. */
function underRun(
  home: string,
  args: string[],
): [string, string[], { env: Record<string, string>; cwd: string }] {
  const argv = [CLI, ...homeArgs(["run", "--use", "codex-oauth"], f.home, join(f.dir, "keybroker.yaml"))];
  return [
    process.execPath,
    [...argv, "--", `${BIN}/codex`, ...args],
    { env: { HOME: home, TMPDIR: join(home, "../tmp") }, cwd: join(home, "../work") },
  ];
}

/**
 * `codex login` started until it prints its authorization URL. Its ports are fixed: while
 * another test file's sign-in holds both, Codex says so and exits; it is started again.
 */
async function codexLogin(home: string): Promise<{ login: Running; url: URL }> {
  for (let attempt = 0; ; attempt++) {
    const login = startProcess(...underRun(home, ["login"]));
    try {
      const [url] = await login.waitFor(/https:\/\/auth\.openai\.com\/oauth\/authorize\?\S+/, "stderr");
      return { login, url: new URL(url) };
    } catch (e) {
      await login.exit();
      if (attempt >= 90 || !/is already in use/.test(login.err())) throw e;
      await new Promise((done) => setTimeout(done, 1000));
    }
  }
}

it("codex login under keybroker run: the browser sign-in ends in keybroker's custody, Codex holds phantoms, codex exec answers", async () => {
  const dir = tempHome();
  dirs.push(dir);
  for (const d of ["home", "tmp", "work"]) mkdirSync(join(dir, d));
  home = join(dir, "home");
  const { login, url } = await codexLogin(home);
  codexAuthorize = url;
  const redirect = new URL(url.searchParams.get("redirect_uri")!);
  expect(url.searchParams.get("code_challenge_method")).toBe("S256");
  expect(["1455", "1457"]).toContain(redirect.port);

  // The browser, outside keybroker: auth.openai.com is the fake, reached by its name.
  const browser = new Agent({
    connect: { ca: readFileSync(f.upstream.caPath), servername: "auth.openai.com" },
  });
  const signedIn = await request(`https://127.0.0.1:${f.upstream.port}${url.pathname}${url.search}`, {
    headers: { host: "auth.openai.com" },
    dispatcher: browser,
  });
  await signedIn.body.dump();
  expect(signedIn.statusCode).toBe(302);
  const back = new URL(String(signedIn.headers.location));
  expect(`${back.origin}${back.pathname}`).toBe(`${redirect.origin}${redirect.pathname}`);
  // Back at Codex's loopback server: it exchanges the code through keybroker, then leads the
  // browser to its own success page, and ends once that page is served.
  let landed = await request(back.toString());
  for (let hops = 0; landed.statusCode >= 300 && landed.statusCode < 400 && hops < 5; hops++) {
    await landed.body.dump();
    const next = new URL(String(landed.headers.location), back);
    expect(next.origin, "Codex leads the browser to its own loopback page only").toBe(back.origin);
    landed = await request(next.toString());
  }
  const page = await landed.body.text();
  await browser.close();
  const code = await login.exit();
  const context = `exit ${code}\nstdout:\n${login.out()}\nstderr:\n${login.err()}\npage ${landed.statusCode}: ${page}`;
  expect(code, context).toBe(0);
  expect(login.err(), context).toMatch(/Successfully logged in/i);

  // keybroker holds the real tokens, as the fake issued them at this sign-in.
  const stored = (await new FileTokenStore(f.home).get("codex-oauth", "default"))!;
  expect(stored, context).toBeDefined();
  expect(fake.issued).toContain(stored.accessToken);
  expect(stored.account).toBe(ACCOUNT_ID);
  const codes = f.upstream.received.filter(
    (got) => got.url === "/oauth/token" && /authorization_code/.test(got.body.toString()),
  );
  expect(codes).toHaveLength(1);
  // Codex's file: phantoms only, its account id read from the phantom id token's claims.
  const file = readFileSync(join(home, ".codex/auth.json"), "utf8");
  const auth = JSON.parse(file) as { auth_mode?: string; tokens: Record<string, string> };
  expect(auth.auth_mode).toBe("chatgpt");
  expect(auth.tokens.account_id).toBe(ACCOUNT_ID);
  for (const field of ["access_token", "refresh_token", "id_token"])
    expect(auth.tokens[field]).toMatch(PHANTOM);
  for (const real of fake.issued) expect(file).not.toContain(real);

  // The login Codex now holds works: codex exec answers, the fake's backend saw real tokens only.
  const r = await runProcess(...underRun(home, ["exec", "--skip-git-repo-check", "Reply with one word."]));
  expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
  expect(r.stdout).toContain(ANSWERS.responses);
  expect(fake.backend.length).toBeGreaterThan(0);
  for (const status of fake.backend) expect([200, 101]).toContain(status);
  expect(fake.refreshes).toBe(0);
  expect(fake.reuses).toBe(0);
  expect(fake.phantomsSeen).toBe(0);
  const seen = JSON.stringify(
    f.upstream.received.map((got) => [got.url, got.rawHeaders, got.body.toString()]),
  );
  expect(seen).not.toMatch(PHANTOM);
  expect(JSON.stringify(sockets)).not.toMatch(PHANTOM);
}, 240_000);

it("a token chatgpt.com revokes mid-run (after the routing discovery): Codex's WebSocket gets 401, keybroker refreshes once, Codex connects again and answers; the login stays ok", async () => {
  expect(home, "signed in by the test above").not.toBe("");
  const discovery = "GET /backend-api/wham/accounts/check";
  const check = fake.answers.get(discovery)!;
  fake.answers.set(discovery, (req, res, body) => {
    fake.answers.set(discovery, check);
    void check(req, res, body);
    fake.refuseAccess();
  });
  const from = { backend: fake.backend.length, refreshes: fake.refreshes };
  const r = await runProcess(...underRun(home, ["exec", "--skip-git-repo-check", "Reply with one word."]));
  const context = `${r.stdout}\n${r.stderr}`;
  expect(r.status, context).toBe(0);
  expect(r.stdout).toContain(ANSWERS.responses);
  const statuses = fake.backend.slice(from.backend);
  expect(statuses, context).toContain(401);
  // After the last refusal, Codex's WebSocket went through.
  expect(statuses.slice(statuses.lastIndexOf(401))).toContain(101);
  expect(fake.refreshes - from.refreshes).toBe(1);
  expect(fake.reuses).toBe(0);
  expect(fake.phantomsSeen).toBe(0);
  const status = JSON.parse((await f.cli(["status", "--json"])).stdout) as {
    providers: { id: string; credentials: { state: string }[] }[];
  };
  expect(status.providers.find((p) => p.id === "codex-oauth")!.credentials[0]!.state).toBe("ok");
  const audit = readFileSync(join(f.home, "audit/audit.jsonl"), "utf8");
  expect(audit).not.toContain('"decision":"marked"');
}, 240_000);

// Here rather than in catalogue-subscriptions.test.ts: `codex login` above holds the same fixed
// port while it runs, and the tests of one file run one after another.
it("keybroker auth add codex-oauth, with no rule file, asks auth.openai.com for what this codex login asked", async () => {
  expect(codexAuthorize, "the first test's codex login printed no URL").toBeDefined();
  const real = codexAuthorize!;
  const { url, result } = await authAddUrl("codex-oauth");
  expect(result.status).not.toBe(0);
  expect(`${url.origin}${url.pathname}`).toBe(`${real.origin}${real.pathname}`);
  for (const k of [
    "client_id",
    "scope",
    "redirect_uri",
    "response_type",
    "code_challenge_method",
    "id_token_add_organizations",
    "codex_cli_simplified_flow",
    "originator",
  ]) {
    // Codex falls back to 1457 when 1455 is taken; keybroker's is the first choice.
    const want =
      k === "redirect_uri" ? real.searchParams.get(k)?.replace(":1457/", ":1455/") : real.searchParams.get(k);
    expect(url.searchParams.get(k), k).toBe(want);
  }
});
