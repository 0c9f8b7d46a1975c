// Issue 28 with the real agent programs (test/agents, decision 145): Claude Code with an imported
// `.credentials.json` and with CLAUDE_CODE_OAUTH_TOKEN from `keybroker auth phantom`, Codex CLI
// in ChatGPT mode (`codex exec`) and Gemini CLI with its Google sign-in, each started as
// `keybroker run --use <login> -- <agent> …` after `keybroker auth import` rewrote its file with
// phantoms (docs/subscriptions.md). Every access token the agents hold has expired, so each
// refreshes with its phantom refresh token: keybroker answers that at home (decision 161) and
// performs at most one real refresh per login itself. The fakes of the sign-ins and backends
// (fake-subscriptions.ts) count real refreshes, refresh-token reuse and any request carrying a
// phantom at an authorization server; the backends take only currently valid real tokens. Every
// file of the agents' homes and everything printed is scanned for every real token.
import { once } from "node:events";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { type AddressInfo, createServer } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import {
  CLI,
  type CliResult,
  findSecrets,
  homeArgs,
  outputs,
  ROOT,
  runProcess,
  tempHome,
} from "../helpers/broker.js";
import {
  ANSWERS,
  anthropicMessages,
  geminiAnswer,
  type Json,
  json,
  parse,
  responses,
  responsesSocket,
  type SocketMessage,
  sse,
} from "../helpers/fake-llm.js";
import {
  ACCOUNT_ID,
  type FakeVendor,
  installVendor,
  subscriptionRules,
} from "../helpers/fake-subscriptions.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { oauthLeaks } from "../helpers/oauth-leaks.js";

type Vendor = "codex" | "claude" | "gemini";
const BIN = join(ROOT, "test/agents/node_modules/.bin");
/** Telemetry, update and plugin hosts the agents call: led to a port that closes every connection. */
const ELSEWHERE = [
  "ab.chatgpt.com",
  "api.github.com",
  "github.com",
  "play.googleapis.com",
  "registry.npmjs.org",
  "statsig.anthropic.com",
  "mcp-proxy.anthropic.com",
];
const PROMPT = "Reply with one word.";

const sink = createServer((socket) => socket.destroy());
let f: InProcessFixture;
const fakes = {} as Record<Vendor, FakeVendor>;
const sockets: SocketMessage[] = [];
const agentDirs: string[] = [];
const runs = new Map<string, Ran>();

interface Run {
  readonly name: string;
  readonly vendor: Vendor;
  readonly argv: string[];
  /** The agent's login file under its home, written before keybroker imports it (undefined: none). */
  readonly file?: string;
  readonly answer: string;
  readonly env?: Record<string, string>;
  /** Files the agent needs beside its login (its settings), under its home. */
  readonly extra?: Record<string, unknown>;
}

interface Ran {
  readonly run: Run;
  readonly r: CliResult;
  /** The login file as the import left it, and after the agent ran. */
  readonly imported?: string;
  readonly after?: string;
}

/** The agent's login file, with the fake's tokens, as the agent writes it at sign-in. */
function loginFile(vendor: Vendor): unknown {
  const t = fakes[vendor].login();
  const past = Date.now() - 60_000;
  if (vendor === "claude")
    return {
      claudeAiOauth: {
        accessToken: t.access_token,
        refreshToken: t.refresh_token,
        expiresAt: past,
        scopes: ["user:inference", "user:profile"],
        subscriptionType: "max",
      },
    };
  if (vendor === "codex")
    return {
      auth_mode: "chatgpt",
      OPENAI_API_KEY: null,
      tokens: { ...t, account_id: ACCOUNT_ID },
      last_refresh: new Date(past).toISOString(),
    };
  return { ...t, expiry_date: past };
}

const RUNS: Run[] = [
  {
    name: "claude -p, .credentials.json imported",
    vendor: "claude",
    argv: [`${BIN}/claude`, "-p"],
    file: ".claude/.credentials.json",
    answer: ANSWERS.messages,
    env: { CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1" },
  },
  {
    name: "claude -p, CLAUDE_CODE_OAUTH_TOKEN from auth phantom",
    vendor: "claude",
    argv: [`${BIN}/claude`, "-p"],
    answer: ANSWERS.messages,
    env: { CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1" },
  },
  {
    name: "codex exec, ChatGPT sign-in imported",
    vendor: "codex",
    argv: [`${BIN}/codex`, "exec", "--skip-git-repo-check"],
    file: ".codex/auth.json",
    answer: ANSWERS.responses,
  },
  {
    name: "gemini -p, Google sign-in imported",
    vendor: "gemini",
    argv: [`${BIN}/gemini`, "--skip-trust", "-p"],
    file: ".gemini/oauth_creds.json",
    answer: ANSWERS.gemini,
    env: { GOOGLE_GENAI_USE_GCA: "true" },
    extra: { ".gemini/settings.json": { security: { auth: { selectedType: "oauth-personal" } } } },
  },
];

/** What each agent needs answered to print its answer (the backends check the token first). */
function serveAgents(): void {
  fakes.claude.answers.set("POST /v1/messages", anthropicMessages);
  fakes.claude.answers.set("GET /api/oauth/profile", (_req, res) =>
    json(res, {
      account: { uuid: "0b7c-account", email: "dev@example.com", display_name: "Dev" },
      organization: {
        uuid: "org-1",
        organization_type: "claude_max",
        rate_limit_tier: "default_claude_max_20x",
      },
    }),
  );
  fakes.codex.answers.set("POST /backend-api/codex/responses", responses);
  fakes.codex.socket = (req, socket) => responsesSocket(req, socket, sockets);
  const project = "fake-project-1";
  const wrapped = (body: Buffer) => {
    const request = parse(body);
    return { response: geminiAnswer((request.request ?? {}) as Json, String(request.model)), traceId: "t" };
  };
  const g = fakes.gemini.answers;
  g.set("POST /v1internal:loadCodeAssist", (_req, res) =>
    json(res, {
      currentTier: { id: "free-tier", name: "Gemini Code Assist for individuals" },
      allowedTiers: [{ id: "free-tier", isDefault: true }],
      cloudaicompanionProject: project,
    }),
  );
  g.set("POST /v1internal:onboardUser", (_req, res) =>
    json(res, { done: true, response: { cloudaicompanionProject: { id: project } } }),
  );
  g.set("POST /v1internal:generateContent", (_req, res, body) => json(res, wrapped(body)));
  g.set("POST /v1internal:streamGenerateContent", (_req, res, body) =>
    sse(res, [[undefined, wrapped(body)]]),
  );
  g.set("POST /v1internal:listExperiments", (_req, res) => json(res, { experimentIds: [], flags: [] }));
  g.set("POST /v1internal:retrieveUserQuota", (_req, res) => json(res, { buckets: [] }));
  g.set("POST /v1internal:countTokens", (_req, res) => json(res, { totalTokens: 5 }));
  g.set("GET /oauth2/v2/userinfo", (_req, res) =>
    json(res, { id: "1077", email: "dev@example.com", verified_email: true }),
  );
}

beforeAll(async () => {
  if (!existsSync(join(BIN, "gemini"))) {
    throw new Error(
      "the agents are not installed in test/agents: run `bash test/prereqs.sh` (npm test does)",
    );
  }
  sink.listen(0, "127.0.0.1");
  await once(sink, "listening");
  const sinkPort = (sink.address() as AddressInfo).port;
  f = await startInProcessFixture({
    rules: (u) => {
      for (const v of ["codex", "claude", "gemini"] as const) fakes[v] = installVendor(u, v);
      return subscriptionRules(u, ELSEWHERE.map((h) => `  "${h}:443": "127.0.0.1:${sinkPort}"\n`).join(""));
    },
  });
  serveAgents();
  // Every access token the agents are given has expired: each refreshes before its first request.
  for (const v of Object.values(fakes)) v.accessTtl = -60;
  const homes = RUNS.map((run) => prepare(run));
  for (const v of Object.values(fakes)) v.accessTtl = 3600;
  for (const [i, run] of RUNS.entries()) {
    if (run.file === undefined) continue;
    const r = await f.cli(["auth", "import", run.vendor, "--file", join(homes[i]!, run.file)]);
    expect(r.status, r.stderr).toBe(0);
  }
  // keybroker refreshes each expired login itself, once, before any agent asks.
  for (const v of new Set(RUNS.map((run) => fakes[run.vendor])))
    await vi.waitFor(() => expect(v.refreshes).toBe(1), { timeout: 20_000, interval: 50 });
  const printed = await f.cli(["auth", "phantom", "claude-oauth", "--for", "claude"]);
  expect(printed.status, printed.stderr).toBe(0);
  const variable = /^CLAUDE_CODE_OAUTH_TOKEN=(\S+)$/m.exec(printed.stdout)![1]!;
  expect(variable).toContain("kbph_");
  // All at once: they wait on their own start-up and on the fakes, rarely on each other.
  const ran = await Promise.all(
    RUNS.map((run, i) =>
      runAgent(run, homes[i]!, run.file === undefined ? { CLAUDE_CODE_OAUTH_TOKEN: variable } : {}),
    ),
  );
  for (const one of ran) runs.set(one.run.name, one);
}, 240_000);

afterAll(async () => {
  if (f === undefined) return;
  await f.close();
  sink.close();
  const issued = Object.values(fakes).flatMap((v) => v.issued);
  expect(oauthLeaks(f, issued)).toEqual([]);
  // Every file of the agents' homes, temporary and working folders, and all they printed.
  expect(findSecrets(issued, agentDirs, outputs)).toEqual([]);
}, 60_000);

/** The agent's own folders, with its login file (tokens that expired a minute ago) and settings. */
function prepare(run: Run): string {
  const dir = tempHome();
  agentDirs.push(dir);
  for (const d of ["home", "tmp", "work"]) mkdirSync(join(dir, d));
  const home = join(dir, "home");
  const files = { ...run.extra, ...(run.file === undefined ? {} : { [run.file]: loginFile(run.vendor) }) };
  for (const [name, data] of Object.entries(files)) {
    const path = join(home, name);
    mkdirSync(join(path, ".."), { recursive: true });
    writeFileSync(path, JSON.stringify(data));
    chmodSync(path, 0o600);
  }
  return home;
}

async function runAgent(run: Run, home: string, more: Record<string, string>): Promise<Ran> {
  const imported = run.file === undefined ? undefined : readFileSync(join(home, run.file), "utf8");
  const r = await runProcess(
    process.execPath,
    [
      CLI,
      ...homeArgs(["run", "--use", `${run.vendor}-oauth`], f.home, join(f.dir, "keybroker.yaml")),
      "--",
      ...run.argv,
      PROMPT,
    ],
    {
      env: { HOME: home, TMPDIR: join(home, "../tmp"), ...run.env, ...more },
      cwd: join(home, "../work"),
      deadlineMs: 150_000,
    },
  );
  const after = run.file === undefined ? undefined : readFileSync(join(home, run.file), "utf8");
  return { run, r, imported, after };
}

describe("the agents' subscription sign-ins behind keybroker run, with phantoms only", () => {
  for (const run of RUNS) {
    it(`keybroker run --use ${run.vendor}-oauth -- ${run.name}`, () => {
      const { r, imported, after } = runs.get(run.name)!;
      const context = `${run.name}: exit ${r.status}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`;
      expect(r.status, context).toBe(0);
      expect(r.stdout, context).toContain(run.answer);
      const fake = fakes[run.vendor];
      // At most one real refresh (keybroker's own), no refresh token spent twice, and no
      // request holding a phantom ever reached the authorization server.
      expect(fake.refreshes, context).toBe(1);
      expect(fake.reuses).toBe(0);
      expect(fake.phantomsSeen).toBe(0);
      // The backend took every request: each carried the login's current real token.
      expect(fake.backend.length, context).toBeGreaterThan(0);
      for (const status of fake.backend) expect([200, 101], context).toContain(status);
      if (imported !== undefined) {
        // The agent refreshed (its expired file was rewritten) and still holds phantoms only.
        expect(after, context).not.toBe(imported);
        expect(after).toContain("kbph_");
      }
    });
  }

  it("Codex asked chatgpt.com where its account's workspace is routed (wham/accounts/check)", () => {
    // Codex 0.156+ stops with "selected workspace missing from routing discovery" otherwise.
    const asked = f.upstream.received.filter(
      (got) => got.host === "chatgpt.com" && got.url === "/backend-api/wham/accounts/check",
    );
    expect(asked.length).toBeGreaterThan(0);
    for (const got of asked) expect(got.headers["chatgpt-account-id"]).toBe(ACCOUNT_ID);
  });

  it("what reached the fakes carried real tokens only, never a phantom", () => {
    const seen = JSON.stringify(
      f.upstream.received.map((got) => [got.url, got.rawHeaders, got.body.toString()]),
    );
    expect(seen).not.toMatch(/kbph_|eyJrYmwiOi/);
    expect(JSON.stringify(sockets)).not.toMatch(/kbph_|eyJrYmwiOi/);
  });
});
