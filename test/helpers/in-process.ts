// A broker built in the test's own process, for tests of proxy behaviour: the same Broker class
// and rule loading `keybroker start` uses, run from source (no build, no child process, no
// start-up of its own). Its log lines are kept (JSON, as the child writes to a pipe) for the
// secret scan; placeholders come from the function `keybroker env` reads them with. Tests of
// the CLI, of a process's lifecycle and of what a user runs keep the child (broker.ts).
import { EventEmitter } from "node:events";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ProxyAgent } from "undici";
import { afterAll, beforeAll, expect } from "vitest";
import { createLogger } from "../../core/log.js";
import { Broker } from "../../proxy/server.js";
import { loadRules } from "../../rules/load.js";
import {
  type CliResult,
  cliAsync,
  findSecrets,
  homeArgs,
  homeWithCa,
  keepOutput,
  outputs,
  tempHome,
  writeConfig,
} from "./broker.js";
import { ALL_REAL, type FixtureOptions, prepareFixture, REAL_OPENAI } from "./fixture.js";
import { agentPlaceholders, placeholderOf } from "./placeholders.js";
import type { FakeUpstream } from "./upstream.js";

export interface InProcessBroker {
  readonly broker: Broker;
  readonly url: string;
  readonly port: number;
  readonly home: string;
  readonly caPath: string;
  readonly bundlePath: string;
  /** What it logged so far (a child broker writes it to stderr). */
  stderr(): string;
  /** Emits "data" for each line it logs, as a child's stderr does. */
  readonly logged: EventEmitter;
  /** Loads the rule file again and swaps it in, as SIGHUP does. */
  reload(): Promise<void>;
  stop(): Promise<void>;
}

export interface InProcessOptions {
  readonly home?: string;
  /** The rule file's path (undefined: the embedded catalogue). */
  readonly config?: string;
  /** The broker's environment: where it reads secrets and KEYBROKER_* settings from. */
  readonly env?: Record<string, string>;
}

/** Builds and starts a broker here, on 127.0.0.1 port 0; advertised in the home like `start`. */
export async function startInProcessBroker(opts: InProcessOptions = {}): Promise<InProcessBroker> {
  const home = opts.home ?? homeWithCa();
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, ...opts.env };
  const lines: string[] = [];
  const logged = new EventEmitter();
  const log = createLogger(undefined, {
    env: { ...env, KEYBROKER_LOG_FORMAT: "json" },
    stream: {
      write: (line: string) => {
        lines.push(line);
        logged.emit("data", line);
      },
    },
  });
  const broker = await Broker.create({
    home,
    rules: loadRules(opts.config),
    log,
    env,
    port: 0,
    advertise: true,
  });
  const address = await broker.listen();
  let stopped = false;
  return {
    broker,
    url: address.url,
    port: address.port,
    home,
    caPath: broker.ca.certPath,
    bundlePath: broker.bundlePath,
    stderr: () => lines.join(""),
    logged,
    reload: () => broker.reload(loadRules(opts.config)),
    async stop() {
      if (stopped) return;
      stopped = true;
      await broker.close();
      keepOutput(`in-process broker of ${home}`, lines.join(""));
    },
  };
}

/** fixture.ts's Fixture, with the broker in this process. */
export interface InProcessFixture {
  readonly upstream: FakeUpstream;
  readonly broker: InProcessBroker;
  readonly home: string;
  readonly dir: string;
  /** The placeholder `keybroker env --client <client>` prints for the provider's variable. */
  placeholder(provider: string, client?: string): Promise<string>;
  /** Every placeholder `keybroker env --client <client>` prints, by variable name. */
  placeholders(client?: string): Record<string, string>;
  /** `keybroker <args> --home <home> --config <rule file>`: a real CLI, talking to this broker. */
  cli(args: string[], opts?: { env?: Record<string, string> }): Promise<CliResult>;
  proxyAgent(): ProxyAgent;
  leaks(): string[];
  close(): Promise<void>;
}

/** startFixture (fixture.ts), the broker built in this process. */
export async function startInProcessFixture(opts: FixtureOptions = {}): Promise<InProcessFixture> {
  const { upstream, home, dir, config, env } = await prepareFixture(opts);
  const broker = await startInProcessBroker({ home, config, env });
  const placeholders = (client = "default") => agentPlaceholders(broker.broker.runtime, client);
  return {
    upstream,
    broker,
    home,
    dir,
    cli: (args, cliOpts = {}) => cliAsync(homeArgs(args, home, config), cliOpts),
    proxyAgent: () =>
      new ProxyAgent({ uri: broker.url, requestTls: { ca: readFileSync(broker.caPath, "utf8") } }),
    placeholders,
    placeholder: async (provider: string, client = "default") =>
      placeholderOf(placeholders(client), provider),
    leaks: () =>
      findSecrets(
        [...ALL_REAL, ...Object.values(opts.env ?? {})],
        [home, join(dir)],
        [...outputs, broker.stderr()],
      ),
    async close() {
      await broker.stop();
      await upstream.close();
    },
  };
}

/** What most files of requests through an in-process broker start with (sharedOpenAIClient). */
export interface OpenAIClient {
  readonly f: InProcessFixture;
  /** A ProxyAgent through the broker, trusting its CA. */
  readonly agent: ProxyAgent;
  /** The openai placeholder `keybroker env` prints. */
  readonly ph: string;
}

/**
 * A file's in-process fixture, a ProxyAgent through it and its openai placeholder: started
 * before the file's tests, closed after them with a check that nothing the broker wrote holds a
 * secret. The fields are there once the tests run.
 */
export function sharedOpenAIClient(opts: FixtureOptions = {}): OpenAIClient {
  const c = {} as { f: InProcessFixture; agent: ProxyAgent; ph: string };
  beforeAll(async () => {
    c.f = await startInProcessFixture(opts);
    c.agent = c.f.proxyAgent();
    c.ph = await c.f.placeholder("openai");
  });
  afterAll(async () => {
    await c.agent?.close();
    await c.f?.close();
    expect(c.f?.leaks() ?? []).toEqual([]);
  });
  return c;
}

/**
 * A broker whose one provider, `openai` (key REAL_OPENAI), is an upstream on this machine:
 * `api.openai.com:443` resolved to `upstream.port`, its CA trusted. `extra` adds top-level rule
 * lines. Returns the broker, its home and the default client's placeholder for the key.
 */
export async function startOpenAIBehind(
  upstream: { readonly caPath: string; readonly port: number },
  extra = "",
): Promise<{ broker: InProcessBroker; home: string; placeholder: string }> {
  const home = tempHome();
  const config = writeConfig(
    tempHome(),
    `version: 1
upstream_ca: [${JSON.stringify(upstream.caPath)}]
${extra}resolve:
  "api.openai.com:443": "127.0.0.1:${upstream.port}"
providers:
  openai:
    credentials: [OPENAI_API_KEY]
`,
  );
  const broker = await startInProcessBroker({ home, config, env: { OPENAI_API_KEY: REAL_OPENAI } });
  return {
    broker,
    home,
    placeholder: placeholderOf(agentPlaceholders(broker.broker.runtime, "default"), "openai"),
  };
}

/** Either fixture, for helpers that only send requests and read what the broker logged. */
export type AnyFixture = InProcessFixture | import("./fixture.js").Fixture;
