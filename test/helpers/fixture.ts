// A broker wired to a fake upstream: provider hosts resolve to the upstream's port, the
// upstream's test CA is trusted, and real-looking keys sit in the broker's environment only.
import { chmodSync, chownSync, copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ProxyAgent, request } from "undici";
import {
  type BrokerProcess,
  baseEnv,
  type CliResult,
  cliAsync,
  findSecrets,
  homeArgs,
  homeWithCa,
  startBroker,
  tempHome,
  writeConfig,
} from "./broker.js";
import { localPlaceholders, placeholderOf } from "./placeholders.js";
import { type FakeUpstream, startUpstream } from "./upstream.js";

export const REAL_OPENAI = "sk-real-openai-7f3a9c1e5b2d4f60a8e1c3b5d7f9a2c4";
export const REAL_ANTHROPIC = "sk-ant-real-2b4d6f8a0c1e3g5i7k9m1o3q5s7u9w1y";
export const REAL_GEMINI = "AIzaReal-gemini-9x8w7v6u5t4s3r2q1p0o";
export const REAL_GITHUB = "ghp_realgithubtoken0123456789abcdefABCD";
export const ALL_REAL = [REAL_OPENAI, REAL_ANTHROPIC, REAL_GEMINI, REAL_GITHUB];

export const HOSTS = [
  "api.openai.com",
  "api.anthropic.com",
  "generativelanguage.googleapis.com",
  "api.github.com",
  "evil.example",
  "tunnel.test",
];

export interface Fixture {
  readonly upstream: FakeUpstream;
  readonly broker: BrokerProcess;
  readonly home: string;
  readonly dir: string;
  /** The placeholder `keybroker env --client <client>` prints, computed here (placeholders.ts). */
  placeholder(provider: string, client?: string): Promise<string>;
  /** `keybroker <args> --home <home> --config <rule file>`, this fixture's. */
  cli(args: string[], opts?: { env?: Record<string, string> }): Promise<CliResult>;
  /** An undici ProxyAgent through the broker, trusting its CA; the caller closes it. */
  proxyAgent(): ProxyAgent;
  /** The secret scan over the home and every output. */
  leaks(): string[];
  close(): Promise<void>;
}

export function rulesFor(upstream: FakeUpstream, extra = ""): string {
  const resolve = HOSTS.map((h) => `  "${h}:443": "127.0.0.1:${upstream.port}"`).join("\n");
  return `version: 1
upstream_ca: [${JSON.stringify(upstream.caPath)}]
resolve:
${resolve}
providers:
  openai:
    credentials: [OPENAI_API_KEY]
  anthropic:
    credentials: [ANTHROPIC_API_KEY]
  gemini:
    credentials: [GEMINI_API_KEY]
  github:
    hosts: [api.github.com]
    inject: { basic: { username: x-access-token } }
    placeholder: { env: GITHUB_TOKEN }
    credentials: [GITHUB_TOKEN]
    policy:
      - deny: { method: DELETE, path: "/repos/**" }
${extra}`;
}

export interface FixtureOptions {
  readonly extraRules?: string;
  readonly rules?: (u: FakeUpstream) => string;
  /** More variables for the broker's environment (more real keys). */
  readonly env?: Record<string, string>;
  /** Variables for the broker's environment that depend on the upstream (its CA's path). */
  readonly upstreamEnv?: (u: FakeUpstream) => Record<string, string>;
  /** Files to place in the home before the broker starts. */
  readonly prepareHome?: (home: string) => void;
}

/**
 * What a fixture's broker starts from, in a child process or in this one: a recording upstream,
 * a home and a folder with the rule file, the broker's environment with the real keys.
 */
export async function prepareFixture(opts: FixtureOptions) {
  const upstream = await startUpstream();
  const home = homeWithCa();
  const dir = tempHome();
  const config = writeConfig(dir, opts.rules ? opts.rules(upstream) : rulesFor(upstream, opts.extraRules));
  const env = {
    OPENAI_API_KEY: REAL_OPENAI,
    ANTHROPIC_API_KEY: REAL_ANTHROPIC,
    GEMINI_API_KEY: REAL_GEMINI,
    GITHUB_TOKEN: REAL_GITHUB,
    ...opts.env,
    ...opts.upstreamEnv?.(upstream),
  };
  opts.prepareHome?.(home);
  return { upstream, home, dir, config, env };
}

export async function startFixture(opts: FixtureOptions = {}): Promise<Fixture> {
  const { upstream, home, dir, config, env } = await prepareFixture(opts);
  const broker = await startBroker({ home, config, env });
  const cli = (args: string[], cliOpts: { env?: Record<string, string> } = {}) =>
    cliAsync(homeArgs(args, home, config), cliOpts);
  const cache = new Map<string, Promise<Record<string, string>>>();
  return {
    upstream,
    broker,
    home,
    dir,
    cli,
    proxyAgent: () =>
      new ProxyAgent({ uri: broker.url, requestTls: { ca: readFileSync(broker.caPath, "utf8") } }),
    async placeholder(provider: string, client = "default") {
      let pending = cache.get(client);
      if (pending === undefined) {
        pending = localPlaceholders(config, home, baseEnv(env), client);
        cache.set(client, pending);
      }
      return placeholderOf(await pending, provider);
    },
    leaks: () => findSecrets([...ALL_REAL, ...Object.values(opts.env ?? {})], [home, join(dir)]),
    async close() {
      await broker.stop();
      await upstream.close();
    },
  };
}

/**
 * One chat completion through the fixture's broker with its openai placeholder, on an agent of
 * its own (closed after): the status and the body.
 */
export async function chatThrough(fixture: Fixture): Promise<{ status: number; text: string }> {
  const agent = fixture.proxyAgent();
  try {
    const res = await request("https://api.openai.com/v1/chat/completions", {
      method: "POST",
      dispatcher: agent,
      headers: {
        authorization: `Bearer ${await fixture.placeholder("openai")}`,
        "content-type": "application/json",
      },
      body: '{"model":"gpt-test"}',
    });
    return { status: res.statusCode, text: await res.body.text() };
  } finally {
    await agent.close();
  }
}

/**
 * An exfiltration attempt the broker blocks (403 placeholder_host_mismatch): the openai
 * placeholder sent to api.anthropic.com. Returns the status code.
 */
export async function sendBlockedRequest(agent: ProxyAgent, openaiPlaceholder: string): Promise<number> {
  const res = await request("https://api.anthropic.com/v1/messages", {
    method: "POST",
    dispatcher: agent,
    headers: { "x-api-key": openaiPlaceholder },
    body: "{}",
  });
  await res.body.text();
  return res.statusCode;
}

/**
 * Files for a broker or `run` started as the user nobody (uid 65534): in `dir` (opened to 0755),
 * a rule file for `upstream` whose CA is a copy nobody can read, and a `work` folder (its HOME)
 * and a keybroker `home`, both nobody's own at 0700.
 */
export function nobodyFiles(upstream: FakeUpstream, dir: string) {
  chmodSync(dir, 0o755);
  const ca = join(dir, "upstream-ca.pem");
  copyFileSync(upstream.caPath, ca);
  const config = join(dir, "keybroker.yaml");
  writeFileSync(config, rulesFor(upstream).replace(JSON.stringify(upstream.caPath), JSON.stringify(ca)));
  const work = join(dir, "work");
  const home = join(dir, "home");
  for (const d of [work, home]) {
    mkdirSync(d, { mode: 0o700 });
    chownSync(d, 65534, 65534);
  }
  return { config, work, home };
}
