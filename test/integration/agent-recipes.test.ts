// The agents people run, the real programs from the npm registry (test/agents, decision 145),
// each started as `keybroker run -- <agent> …` with nothing else: the real keys in run's
// environment as a user's shell holds them, no configuration file, no flag for keybroker. The
// providers' hosts lead to fakes of their real APIs (fake-llm.ts). Each agent must print the
// fake's answer; the request that carried its prompt must have reached the fake with the real key
// (so the broker injected it), no placeholder may reach the fake, and no real key may be in the
// agent's environment, the files it wrote (its home, its temporary folder, its working folder) or
// what it printed. docs/agents.md's recipes are these commands.
import { once } from "node:events";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { type AddressInfo, createServer } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI, type CliResult, findSecrets, ROOT, runProcess, tempHome } from "../helpers/broker.js";
import { ANSWERS, type SocketMessage, serveModelApis } from "../helpers/fake-llm.js";
import { REAL_ANTHROPIC, REAL_GEMINI, REAL_OPENAI } from "../helpers/fixture.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import type { FakeUpstream } from "../helpers/upstream.js";

const REAL_DEEPSEEK = "sk-real-deepseek-4c6e8a0b2d4f6a8c0e2b6d8f";
const REAL = { openai: REAL_OPENAI, anthropic: REAL_ANTHROPIC, gemini: REAL_GEMINI, deepseek: REAL_DEEPSEEK };
type Provider = keyof typeof REAL;

const BIN = join(ROOT, "test/agents/node_modules/.bin");
const PYTHON = "/usr/bin/python3";
const HOSTS = [
  "api.openai.com",
  "api.anthropic.com",
  "generativelanguage.googleapis.com",
  "api.deepseek.com",
];
/**
 * The other hosts the agents call (model lists, telemetry, plugin and update checks): led to a
 * local port that closes every connection, so the test stays on this machine. afterAll fails
 * on a host missing here.
 */
const ELSEWHERE = [
  "chatgpt.com",
  "ab.chatgpt.com",
  "api.github.com",
  "github.com",
  "play.googleapis.com",
  "registry.npmjs.org",
  "models.dev",
  "opencode.ai",
];

/** The catalogue's providers as a user names them; the hosts lead to the fake (rule-file.md). */
function rules(upstream: FakeUpstream): string {
  const resolve = [
    ...HOSTS.map((h) => `  "${h}:443": "127.0.0.1:${upstream.port}"`),
    ...ELSEWHERE.map((h) => `  "${h}:443": "127.0.0.1:${(sink.address() as AddressInfo).port}"`),
  ].join("\n");
  return `version: 1
upstream_ca: [${JSON.stringify(upstream.caPath)}]
resolve:
${resolve}
providers:
  openai:
  anthropic:
  gemini:
  deepseek:
`;
}

interface Agent {
  readonly name: string;
  /** The command after `keybroker run --`, the prompt last. */
  readonly argv: string[];
  readonly provider: Provider;
  readonly api: keyof typeof ANSWERS;
  /** The paths its model requests went to (each must be among them). */
  readonly paths: RegExp[];
  /**
   * The agent's own documented switches for telemetry, update checks and model-list downloads:
   * this machine is offline, and those calls would only wait on hosts that cannot answer. They
   * are the test's offline setting, not a keybroker step.
   */
  readonly offline?: Record<string, string>;
}

const PROMPT = "Reply with one word.";
const MESSAGES = /^\/v1\/messages$/;
const RESPONSES = /^\/v1\/responses$/;
const GEMINI_STREAM = /^\/v1beta\/models\/[\w.-]+:streamGenerateContent$/;
const claudeOffline = { CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1" };
const opencodeOffline = {
  OPENCODE_DISABLE_MODELS_FETCH: "1",
  OPENCODE_DISABLE_AUTOUPDATE: "1",
  OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
  OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
};
const piOffline = { PI_OFFLINE: "1" };

const AGENTS: Agent[] = [
  {
    name: "claude -p",
    argv: [`${BIN}/claude`, "-p"],
    provider: "anthropic",
    api: "messages",
    paths: [MESSAGES],
    offline: claudeOffline,
  },
  // Codex speaks the Responses API over a WebSocket.
  {
    name: "codex exec",
    argv: [`${BIN}/codex`, "exec", "--skip-git-repo-check"],
    provider: "openai",
    api: "responses",
    paths: [RESPONSES],
  },
  // Gemini CLI first asks a small model to rate the prompt (generateContent, JSON out), then
  // streams the answer from the model it picked.
  {
    name: "gemini -p",
    argv: [`${BIN}/gemini`, "--skip-trust", "-p"],
    provider: "gemini",
    api: "gemini",
    paths: [/^\/v1beta\/models\/[\w.-]+:generateContent$/, GEMINI_STREAM],
  },
  ...(
    [
      ["anthropic/claude-sonnet-4-5", "anthropic", "messages", MESSAGES],
      ["openai/gpt-5.1", "openai", "responses", RESPONSES],
      ["google/gemini-2.5-flash", "gemini", "gemini", GEMINI_STREAM],
    ] as const
  ).map(([model, provider, api, path]) => ({
    name: `opencode run -m ${model}`,
    argv: [`${BIN}/opencode`, "run", "-m", model],
    provider,
    api,
    paths: [path],
    offline: opencodeOffline,
  })),
  // pi, on the Node that runs the tests (it sets undici's EnvHttpProxyAgent itself): Chat
  // Completions (DeepSeek's, no /v1) and Gemini.
  ...(
    [
      ["deepseek/deepseek-v4-flash", "deepseek", "chat", /^\/chat\/completions$/],
      ["google/gemini-2.5-flash", "gemini", "gemini", GEMINI_STREAM],
    ] as const
  ).map(([model, provider, api, path]) => ({
    name: `pi -p --model ${model}`,
    argv: [`${BIN}/pi`, "-p", "--model", model],
    provider,
    api,
    paths: [path],
    offline: piOffline,
  })),
  // The openai package's way (httpx, the environment's proxy and CA), Chat Completions.
  {
    name: "a Python script (httpx)",
    argv: [PYTHON, join(ROOT, "test/fixtures/clients/python-agent.py")],
    provider: "openai",
    api: "chat",
    paths: [/^\/v1\/chat\/completions$/],
  },
];

const sink = createServer((socket) => socket.destroy());
let f: InProcessFixture;
let sockets: SocketMessage[];
const agentDirs: string[] = [];
const runs = new Map<string, Ran>();

beforeAll(async () => {
  if (!existsSync(join(BIN, "opencode"))) {
    throw new Error(
      "the agents are not installed in test/agents: run `bash test/prereqs.sh` (npm test does)",
    );
  }
  sink.listen(0, "127.0.0.1");
  await once(sink, "listening");
  f = await startInProcessFixture({ env: { DEEPSEEK_API_KEY: REAL_DEEPSEEK }, rules });
  sockets = serveModelApis(f.upstream);
  // All at once: they wait on their own start-up and on the fake, rarely on each other.
  for (const ran of await Promise.all(AGENTS.map((agent, i) => runAgent(agent, i, f.home)))) {
    runs.set(ran.agent.name, ran);
  }
}, 240_000);

afterAll(async () => {
  if (f === undefined) return;
  await f.close();
  sink.close();
  expect(f.leaks()).toEqual([]);
  // What the agents wrote (their homes, temporary and working folders) and printed.
  expect(findSecrets(Object.values(REAL), agentDirs)).toEqual([]);
  // Nothing left this machine: every host the broker tunnelled to is one led to the sink.
  const tunnelled = readFileSync(join(f.home, "audit/audit.jsonl"), "utf8")
    .split("\n")
    .filter((line) => line.includes('"passthrough"'))
    .map((line) => String(JSON.parse(line).host));
  for (const host of tunnelled) expect(ELSEWHERE.map((h) => `${h}:443`)).toContain(host);
});

interface Ran {
  readonly agent: Agent;
  readonly r: CliResult;
  /** The environment the agent started with, as `env` printed it. */
  readonly environ: Record<string, string>;
  readonly marker: string;
}

/**
 * `keybroker run -- <agent>` with the broker of `home` (started if none runs), in a fresh home,
 * temporary and working folder of the agent's own. A shell writes the environment it was given
 * into the agent's home before it execs the agent: that is the environment the agent starts with.
 */
async function runAgent(agent: Agent, index: number, home: string): Promise<Ran> {
  const dir = tempHome();
  agentDirs.push(dir);
  const [agentHome, tmp, work] = ["home", "tmp", "work"].map((d) => join(dir, d)) as [string, string, string];
  for (const d of [agentHome, tmp, work]) mkdirSync(d);
  // The prompt names the run, so the requests that carried it are found among the fake's.
  const marker = `run-${index}-${process.pid}`;
  const env = {
    HOME: agentHome,
    TMPDIR: tmp,
    // What the user's shell exports: the real keys, under their usual names.
    OPENAI_API_KEY: REAL.openai,
    ANTHROPIC_API_KEY: REAL.anthropic,
    GEMINI_API_KEY: REAL.gemini,
    DEEPSEEK_API_KEY: REAL.deepseek,
    ...agent.offline,
  };
  const dump = 'env > "$HOME/.environ-at-start"; exec "$@"';
  const config = join(f.dir, "keybroker.yaml");
  const command = ["/bin/sh", "-c", dump, "sh", ...agent.argv, `${PROMPT} (${marker})`];
  // An agent that hangs is killed (status null) well before the hook's timeout, with its output.
  const r = await runProcess(
    process.execPath,
    [CLI, "run", "--home", home, "--config", config, "--", ...command],
    {
      env,
      cwd: work,
      deadlineMs: 150_000,
    },
  );
  // Missing when run failed before the agent started: the status check then says why.
  const dumped = join(agentHome, ".environ-at-start");
  const environ = Object.fromEntries(
    (existsSync(dumped) ? readFileSync(dumped, "utf8") : "")
      .split("\n")
      .filter((line) => line.includes("="))
      .map((line) => [line.slice(0, line.indexOf("=")), line.slice(line.indexOf("=") + 1)]),
  );
  return { agent, r, environ, marker };
}

/** Every request (and WebSocket message) the fake received that carried `marker`. */
function carrying(marker: string) {
  const requests = f.upstream.received
    .filter((got) => got.body.includes(marker))
    .map((got) => ({ path: got.url.split("?")[0]!, headers: got.headers, url: got.url }));
  const messages = sockets
    .filter((m) => m.text.includes(marker))
    .map((m) => ({ path: m.url.split("?")[0]!, headers: m.headers, url: m.url }));
  return [...requests, ...messages];
}

/** The credential a request carried, wherever its API puts it. */
function credentialOf(got: { headers: Record<string, unknown>; url: string }): string {
  const header = got.headers["x-api-key"] ?? got.headers["x-goog-api-key"] ?? got.headers.authorization;
  if (header !== undefined) return String(header).replace(/^Bearer /, "");
  return new URL(got.url, "https://x").searchParams.get("key") ?? "";
}

/** The agent printed the fake's answer; its requests reached the fake with the real key only. */
function expectWorked({ agent, r, environ, marker }: Ran): void {
  const context = `${agent.name}: exit ${r.status}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`;
  expect(r.status, context).toBe(0);
  expect(r.stdout, context).toContain(ANSWERS[agent.api]);
  // Its model request, and any other (opencode asks a small model for a title): the real key.
  const sent = carrying(marker);
  for (const path of agent.paths) {
    expect(
      sent.some((got) => path.test(got.path)),
      `${path} in ${JSON.stringify(sent.map((got) => got.path))}\n${context}`,
    ).toBe(true);
  }
  for (const got of sent) expect(credentialOf(got)).toBe(REAL[agent.provider]);
  // It started with the proxy and placeholders, and with no real key under any name.
  expect(environ.HTTPS_PROXY).toMatch(/^http:\/\/127\.0\.0\.1:/);
  expect(environ.OPENAI_API_KEY).toMatch(/kbph-/);
  for (const [name, value] of Object.entries(environ)) {
    for (const real of Object.values(REAL)) expect(value, name).not.toContain(real);
  }
}

describe("the agents people run work behind keybroker run, with nothing else", () => {
  for (const agent of AGENTS) {
    it(`keybroker run -- ${agent.name}`, () => expectWorked(runs.get(agent.name)!));
  }

  it("no placeholder reached the fake: the broker swapped every one it was sent", () => {
    const headers = JSON.stringify(f.upstream.received.map((got) => [got.url, got.rawHeaders]));
    expect(headers).toContain(REAL_ANTHROPIC);
    expect(headers).not.toContain("kbph-");
  });

  it("keybroker run -- claude -p with no broker running: run starts one from its own environment", async () => {
    const home = tempHome();
    agentDirs.push(home);
    const ran = await runAgent(AGENTS[0]!, AGENTS.length, home);
    // The fake saw the real key: the broker run started read it from run's environment.
    expectWorked(ran);
  }, 60_000);
});
