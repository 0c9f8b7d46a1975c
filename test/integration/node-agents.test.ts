// Node agents under `keybroker run`, on Node 20, 22 and 24, with nothing configured but the
// environment: global fetch, `https.request` and the openai SDK must each reach the provider
// through the broker (the provider sees the real key, so the broker injected it), and nothing
// may be printed on stderr (Node 22 warns for every process that NODE_USE_ENV_PROXY is
// experimental). Node 20 ignores HTTPS_PROXY altogether: keybroker's preload does the routing.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NODE_PRELOAD } from "../../cli/agent-setup.js";
import { cliAsync, ROOT } from "../helpers/broker.js";
import { type Fixture, REAL_OPENAI, startFixture } from "../helpers/fixture.js";
import { NODE_VERSIONS, nodeBinary } from "../helpers/node-versions.js";

const AGENT = join(ROOT, "test/fixtures/clients/node-agent.mjs");

let f: Fixture;
const binaries: Record<string, string> = {};

beforeAll(async () => {
  f = await startFixture();
  // The suite's own node when it is a Node 20 (as in CI); run on 22 or 24, it fetches one.
  binaries[20] = process.versions.node.startsWith("20.") ? process.execPath : await nodeBinary(20);
  for (const major of [22, 24] as const) binaries[major] = await nodeBinary(major);
}, 600_000);

afterAll(async () => {
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

interface AgentResult {
  node: string;
  fetch: number | string;
  https: number | string;
  openai: number | string;
  http: string;
  httpsAgent: string;
}

async function runAgent(major: string, extra: string[] = []) {
  const before = f.upstream.received.length;
  const own = ["--home", f.home, "--config", join(f.dir, "keybroker.yaml")];
  // --no-isolate and --quiet: nothing on stderr, not even run's notice that the agent is not
  // isolated, nor its lines naming each provider's placeholder.
  const r = await cliAsync([
    "run",
    "--no-isolate",
    "--quiet",
    ...own,
    ...extra,
    "--",
    binaries[major]!,
    AGENT,
  ]);
  const received = f.upstream.received.slice(before);
  expect(r.stdout).not.toContain(REAL_OPENAI);
  expect(r.stderr).not.toContain(REAL_OPENAI);
  const last = r.stdout.trim().split("\n").at(-1) ?? "";
  expect(r.status, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`).toBe(0);
  return { r, result: JSON.parse(last) as AgentResult, received };
}

describe("Node agents under keybroker run", () => {
  for (const major of ["20", "22", "24"]) {
    it(`Node ${major}: fetch, https.request and the openai SDK go through the broker, silently`, async () => {
      const { r, result, received } = await runAgent(major);
      expect(result.node.startsWith(`v${major}.`)).toBe(true);
      if (binaries[major] !== process.execPath)
        expect(result.node).toBe(`v${NODE_VERSIONS[major as "20" | "22" | "24"]}`);
      expect({ fetch: result.fetch, https: result.https, openai: result.openai }).toEqual({
        fetch: 200,
        https: 200,
        openai: 200,
      });
      // Each reached the provider with the real key: the broker saw it and injected.
      const byClient = new Map(received.map((got) => [got.headers["x-test-client"], got]));
      for (const client of ["fetch", "https", "openai"]) {
        const got = byClient.get(client);
        expect(got, `${client} never reached the provider`).toBeDefined();
        expect(got!.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
        expect(got!.host).toBe("api.openai.com");
      }
      // Plain HTTP reached the broker too (which forwards it uninjected; this host does not exist).
      expect(result.http).toMatch(/^5\d\d [a-z_]+$/);
      expect(r.stderr).toBe("");
      // Node 22.21+ and 24 route by themselves (NODE_USE_ENV_PROXY): the preload leaves them be.
      expect(result.httpsAgent).toBe(major === "20" ? "TunnellingAgent" : "Agent");
    });
  }

  it("--no-node-preload leaves NODE_OPTIONS alone: Node 20's fetch then bypasses the broker", async () => {
    const { r, result, received } = await runAgent("20", ["--no-node-preload"]);
    expect(result.fetch).toMatch(/^error: /);
    expect(result.https).toMatch(/^error: /);
    expect(result.http).toMatch(/^error: /);
    expect(received).toEqual([]);
    expect(r.stderr).toBe("");
  });

  it("env prints NODE_OPTIONS only with --node-preload, keeping the current options first", async () => {
    const plain = await f.cli(["env", "--format", "json"], {
      env: { NODE_OPTIONS: "--max-old-space-size=512" },
    });
    expect(plain.status, plain.stderr).toBe(0);
    expect(JSON.parse(plain.stdout).NODE_OPTIONS).toBeUndefined();
    const r = await f.cli(["env", "--format", "json", "--node-preload"], {
      env: { NODE_OPTIONS: "--max-old-space-size=512" },
    });
    expect(r.status, r.stderr).toBe(0);
    const options = String(JSON.parse(r.stdout).NODE_OPTIONS).split(" ");
    expect(options[0]).toBe("--max-old-space-size=512");
    expect(options).toContain("--disable-warning=UNDICI-EHPA");
    const preload = options.find((o) => o.startsWith("--import="));
    expect(preload).toMatch(/^--import=file:\/\/\/.*\/dist\/cli\/node-preload\.js$/);
    expect(decodeURIComponent(new URL(preload!.slice("--import=".length)).pathname)).toBe(NODE_PRELOAD);
  });
});
