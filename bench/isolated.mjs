// The `isolated` variant (docs/performance.md, "Isolated launches"): the broker reached the way
// an agent under `keybroker run --isolate` reaches it. The load generator itself is the launch's
// command (bench/isolated-agent.mjs, inside the jail, dialling the proxy address the launch's
// variables name), driven over the launch's stdin and stdout: no hop of the bench's own is
// counted, only what the launch puts between an agent and the broker.
//
// Also measured here: the cost per launch, `run --isolate -- true` against `run -- true`.
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { BROKER_MAIN } from "./broker.mjs";
import { startChild, stopChild } from "./procs.mjs";

const AGENT = fileURLToPath(new URL("./isolated-agent.mjs", import.meta.url));

/**
 * Wraps a started broker: a launch against it (`keybroker run --isolate`, or `--no-isolate` for
 * the `launched` variant: the same load generator in a process of its own, not isolated) whose
 * command generates the load. Resolves a broker-like object whose `remote.load` runs the
 * throughput loop in the launch.
 */
export async function launchBroker(broker, { dir, home, name, upstream, isolate }) {
  const { child } = await startChild({
    name: `keybroker run ${isolate ? "--isolate" : "--no-isolate"} (${name})`,
    cmd: process.execPath,
    args: [
      BROKER_MAIN,
      "run",
      isolate ? "--isolate" : "--no-isolate",
      "--no-node-preload",
      "--home",
      home,
      "--config",
      broker.config,
      "--port",
      String(broker.port),
      "--",
      process.execPath,
      AGENT,
    ],
    env: { ...process.env },
    // The jail's /tmp is its own (decision 135); the bench folder, its working folder, stays.
    cwd: dir,
    logFile: path.join(dir, `${name}-run.log`),
    ready: (line) => line === "agent ready",
  });
  const answers = lineReader(child);
  const ask = async (message) => {
    child.stdin.write(`${JSON.stringify(message)}\n`);
    return answers.next();
  };
  await ask({ cmd: "init", upstreamPort: upstream.port, caPem: String(broker.caPem) });
  return {
    ...broker,
    launchPid: child.pid,
    remote: {
      async load(target, conc, seconds, lat) {
        const r = await ask({ cmd: "load", conc, seconds, lat: lat !== undefined });
        target.sent += r.sent;
        for (let i = 0; i < r.error_count; i++)
          target.noteError("inside the launch", r.errors[i] ?? "(more)");
        if (lat !== undefined) for (const x of r.lat) lat.push(x);
        return { ok: r.ok, seconds: r.seconds, client_cpu_s: r.cpu_s };
      },
      reset: () => ask({ cmd: "reset" }),
    },
    stop: async () => {
      await stopChild(child);
      await broker.stop();
    },
  };
}

/** The JSON lines a child writes after its ready line, one per `next()`. */
function lineReader(child) {
  let buf = "";
  const queue = [];
  const waiting = [];
  child.stdout.on("data", (text) => {
    buf += text;
    for (let nl = buf.indexOf("\n"); nl !== -1; nl = buf.indexOf("\n")) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (!line.startsWith("{")) continue;
      const value = JSON.parse(line);
      if (waiting.length > 0) waiting.shift().resolve(value);
      else queue.push(value);
    }
  });
  child.once("exit", (code, signal) => {
    for (const w of waiting.splice(0)) w.reject(new Error(`the isolated launch exited (${signal ?? code})`));
  });
  return {
    next: () =>
      queue.length > 0
        ? Promise.resolve(queue.shift())
        : new Promise((resolve, reject) => waiting.push({ resolve, reject })),
  };
}

/** Milliseconds for `keybroker run [--isolate] -- true` against a running broker: median of `n`. */
export function launchCost(broker, home, n = 7) {
  const time = (extra) => {
    const samples = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      const r = spawnSync(
        process.execPath,
        [
          BROKER_MAIN,
          "run",
          ...extra,
          "--home",
          home,
          "--config",
          broker.config,
          "--port",
          String(broker.port),
          "--",
          "true",
        ],
        { stdio: ["ignore", "ignore", "pipe"], encoding: "utf8" },
      );
      if (r.status !== 0) throw new Error(`keybroker run ${extra.join(" ")} failed: ${r.stderr}`);
      samples.push(performance.now() - t0);
    }
    samples.sort((a, b) => a - b);
    return samples[Math.floor(n / 2)];
  };
  return { plain_ms: time(["--no-isolate"]), isolated_ms: time(["--isolate"]) };
}
