// The broker keeps no secret in its initial environment (docs/spec.md §20, decision 119): started the
// README's way with the key exported to it, or by `keybroker run` for its command, no process's
// /proc/<pid>/environ or cmdline holds the key, and the broker still injects it upstream.
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ProxyAgent, request } from "undici";
import { afterAll, describe, expect, it } from "vitest";
import { type BrokerProcess, cliAsync, scannedHomes, startBroker, writeConfig } from "../helpers/broker.js";
import { curlChatArgs } from "../helpers/curl.js";
import { dumpEnvirons, dumpsHolding, processesHolding, uniqueSecret } from "../helpers/environ.js";
import { rulesFor } from "../helpers/fixture.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const KEY = uniqueSecret("sk-real-environ-");
const COPY = `prefix ${KEY}`;
const { home } = scannedHomes([KEY]);
let upstream: FakeUpstream | undefined;
let broker: BrokerProcess | undefined;
afterAll(async () => {
  await broker?.stop();
  await upstream?.close();
});

/**
 * An agent that lists every process's environment and command line, then calls the API with curl.
 * `read()` gives what it listed and removes the list.
 */
function writeAgent(dir: string): { agent: string; read: () => string } {
  const agent = join(dir, "agent.cjs");
  const dumpDir = mkdtempSync(join(tmpdir(), "kb-environ-dump-"));
  const dump = join(dumpDir, "environs.jsonl");
  writeFileSync(
    agent,
    `${dumpEnvirons(dump)}
const { execFileSync } = require("node:child_process");
console.log("curl:", execFileSync("curl", ${JSON.stringify(curlChatArgs("KEY"))}.map((a) =>
  a.replace("Bearer KEY", "Bearer " + process.env.OPENAI_API_KEY)), { encoding: "utf8" }).trim().split("\\n").at(-1));
`,
  );
  const read = () => {
    const text = readFileSync(dump, "utf8");
    rmSync(dumpDir, { recursive: true, force: true });
    return text;
  };
  return { agent, read };
}

describe("keybroker start", () => {
  it("hands no process an environment or command line with the key, and still injects it", async () => {
    upstream = await startUpstream();
    const h = home();
    const config = writeConfig(h, rulesFor(upstream));
    // The README's way: OPENAI_API_KEY=sk-… keybroker start, plus a copy under another name.
    broker = await startBroker({ home: h, config, env: { OPENAI_API_KEY: KEY, MY_COPY: COPY } });
    const pid = broker.child.pid!;
    expect(processesHolding(KEY)).toEqual([]);
    // The variables are still there, emptied: the broker's own pid serves.
    const environ = readFileSync(`/proc/${pid}/environ`, "latin1");
    expect(environ).toMatch(/(^|\0)OPENAI_API_KEY=\0/);
    expect(environ).toMatch(/(^|\0)MY_COPY=\0/);

    const vars = await cliAsync(["env", "--home", h, "--config", config, "--format", "json"]);
    expect(vars.status, vars.stderr).toBe(0);
    const placeholder = (JSON.parse(vars.stdout) as Record<string, string>).OPENAI_API_KEY!;
    const agent = new ProxyAgent({
      uri: broker.url,
      requestTls: { ca: readFileSync(broker.caPath, "utf8") },
    });
    const res = await request("https://api.openai.com/v1/models", {
      dispatcher: agent,
      headers: { authorization: `Bearer ${placeholder}` },
    });
    await res.body.text();
    await agent.close();
    expect(res.statusCode).toBe(200);
    expect(upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${KEY}`);

    // keybroker run, using this broker, started from a shell that exports the key: its command
    // finds the key in no process either (run blanks its own environment too).
    const dumped = writeAgent(h);
    const runs = await cliAsync(
      ["run", "--home", h, "--config", config, "--", process.execPath, dumped.agent],
      {
        env: { OPENAI_API_KEY: KEY },
      },
    );
    expect(runs.status, runs.stderr).toBe(0);
    expect(runs.stdout).toContain("curl: 200");
    const dump = dumped.read();
    expect(dump).toContain(`{"pid":"${pid}"`); // the broker's own, among every other
    expect(dumpsHolding(dump, KEY)).toEqual([]);
    expect(upstream.received.at(-1)!.headers.authorization).toBe(`Bearer ${KEY}`);

    // keybroker stop finds and stops that pid; it says so and exits cleanly.
    const exited = once(broker.child, "exit");
    const stop = await cliAsync(["stop", "--home", h]);
    expect(stop.status, stop.stderr).toBe(0);
    expect(stop.stdout).toContain(`pid ${pid}`);
    expect(await exited).toEqual([0, null]);
    expect(broker.stdout()).toMatch(/keybroker stopped \(SIGTERM\)\n$/);
    await broker.stop();
  }, 60_000);
});

describe("keybroker run, with a broker of its own", () => {
  it("leaves the key in no environment its command can list, and the command's requests carry it", async () => {
    upstream ??= await startUpstream();
    const h = home();
    const config = writeConfig(h, rulesFor(upstream));
    const dumped = writeAgent(h);
    const before = upstream.received.length;
    const r = await cliAsync(["run", "--home", h, "--config", config, "--", process.execPath, dumped.agent], {
      env: { OPENAI_API_KEY: KEY, MY_COPY: COPY },
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain("curl: 200");
    // The dump covers the agent's parent (keybroker run, the broker) and every other process.
    const dump = dumped.read();
    expect(dump).toContain(`{"pid":"${process.pid}"`);
    expect(dumpsHolding(dump, KEY)).toEqual([]);
    expect(upstream.received.slice(before).map((x) => x.headers.authorization)).toEqual([`Bearer ${KEY}`]);
  }, 60_000);
});
