// `run --isolate` with a broker started elsewhere (decision 136): the broker names the files its
// own secret sources read (here the `.env` of the folder it was started in), and `run`, started
// from another folder, hides them too; and a launch is tied to its `run`: killed outright, run
// cannot end it, so the broker does once it sees run gone, and the token then gets 407.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type BrokerProcess,
  CLI,
  cliAsync,
  findSecrets,
  startBroker,
  tempHome,
  writeConfig,
} from "../helpers/broker.js";
import { REAL_OPENAI, rulesFor } from "../helpers/fixture.js";
import { until } from "../helpers/fleet.js";
import { rawExchange } from "../helpers/raw.js";
import { type FakeUpstream, startUpstream } from "../helpers/upstream.js";

const CURL = `curl -sS -o /dev/null -w '%{http_code}' -X POST https://api.openai.com/v1/chat/completions -H "Authorization: Bearer $OPENAI_API_KEY" -d '{}'`;

let upstream: FakeUpstream;
let broker: BrokerProcess;
let home: string;
let config: string;
/** The folder the broker was started in, with its .env: outside /tmp, as a user's project is. */
let projectA: string;
const spawned: ChildProcess[] = [];

beforeAll(async () => {
  upstream = await startUpstream();
  projectA = mkdtempSync(join(homedir(), ".kb-test-project-"));
  writeFileSync(join(projectA, ".env"), `OPENAI_API_KEY=${REAL_OPENAI}\n`, { mode: 0o600 });
  home = tempHome();
  config = writeConfig(tempHome(), rulesFor(upstream));
  // `cd projectA && keybroker start`: the key comes from ./.env, not the environment.
  broker = await startBroker({ home, config, cwd: projectA });
});

afterAll(async () => {
  for (const c of spawned) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  await broker?.stop();
  await upstream?.close();
  if (projectA !== undefined) rmSync(projectA, { recursive: true, force: true });
  expect(findSecrets([REAL_OPENAI], [home])).toEqual([]);
});

function kb(args: string[], cwd?: string) {
  return cliAsync([...args, "--home", home, "--config", config], cwd === undefined ? {} : { cwd });
}

async function launches(): Promise<{ id: string }[]> {
  const r = await kb(["status", "--json"]);
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout).launches;
}

describe("run --isolate beside a running broker", () => {
  it("hides the .env the broker reads, though run starts in another folder", async () => {
    const projectB = tempHome();
    const r = await cliAsync(
      [
        "run",
        "--isolate",
        "--home",
        home,
        "--config",
        config,
        "--",
        "sh",
        "-c",
        `cat ${projectA}/.env; ${CURL}`,
      ],
      { cwd: projectB },
    );
    expect(r.status, r.stderr).toBe(0);
    // The request got the key the broker read from projectA/.env; the agent read nothing.
    expect(r.stdout).toBe("200");
    expect(upstream.received.at(-1)?.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    expect(findSecrets([REAL_OPENAI], [], [r.stdout, r.stderr])).toEqual([]);
  });

  it("ends a launch whose run was killed outright: gone from status, its token refused", async () => {
    const child = spawn(
      process.execPath,
      [
        CLI,
        ...["run", "--isolate", "--home", home, "--config", config, "--"],
        ...["sh", "-c", `echo "started $HTTPS_PROXY"; sleep 4567.${process.pid}`],
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    spawned.push(child);
    let out = "";
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
    });
    await new Promise<void>((resolve, reject) => {
      child.stdout!.on("data", () => {
        if (/started \S+\n/.test(out)) resolve();
      });
      child.once("exit", () => reject(new Error(`run exited: ${out}`)));
    });
    const proxy = new URL(/started (\S+)/.exec(out)![1]!);
    const id = decodeURIComponent(proxy.username).replace(/^launch-/, "");
    expect((await launches()).map((l) => l.id)).toContain(id);

    child.kill("SIGKILL");
    await until(async () => !(await launches()).some((l) => l.id === id), "the launch to end", 20_000);
    const basic = Buffer.from(
      `${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`,
    ).toString("base64");
    const answer = await rawExchange(
      broker.port,
      `CONNECT api.openai.com:443 HTTP/1.1\r\nhost: api.openai.com:443\r\nproxy-authorization: Basic ${basic}\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 407 /);
    const ended = readFileSync(join(home, "audit", "audit.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { decision: string; launch?: string; reason?: string })
      .filter((l) => l.decision === "launch_ended" && l.launch === id);
    expect(ended).toHaveLength(1);
    expect(ended[0]!.reason).toMatch(/its run is gone$/);
  });
});
