// The `isolated` variant (docs/performance.md, "Isolated launches"): the broker reached the way
// an agent under `keybroker run --isolate` reaches it, through the launch's relays (a listener
// inside the jail's network namespace, a unix socket, `run`'s relay to the broker's port).
//
// The load generator stays in this process, outside the jail, so it reaches the jail's
// listener through one more hop: a bridge started inside the jail that accepts on a unix
// socket in the bench folder and connects to the in-jail proxy address. The figure is
// therefore an upper bound of what the relays cost an agent inside.
//
// Also measured here: the cost per launch, `run --isolate -- true` against `run -- true`.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { BROKER_MAIN } from "./broker.mjs";
import { startChild, stopChild } from "./procs.mjs";

const BRIDGE = `
const net = require("net");
const proxy = new URL(process.env.HTTPS_PROXY);
const server = net.createServer({ noDelay: true }, (c) => {
  const up = net.connect(Number(proxy.port), "127.0.0.1");
  up.setNoDelay(true);
  const end = () => { c.destroy(); up.destroy(); };
  c.on("error", end).on("close", end);
  up.on("error", end).on("close", end);
  c.pipe(up);
  up.pipe(c);
});
server.listen(process.argv[1], () => console.log("bridge " + process.env.HTTPS_PROXY));
process.on("SIGTERM", () => process.exit(0));
`;

/**
 * Wraps a started broker: an isolated launch against it whose bridge the bench's client dials.
 * Resolves a broker-like object (`proxyUrl` with the launch's credentials, `socketPath`).
 */
export async function isolateBroker(broker, { dir, home, name }) {
  const socketPath = path.join(dir, `${name}.sock`);
  fs.rmSync(socketPath, { force: true });
  const { child, value } = await startChild({
    name: `keybroker run --isolate (${name})`,
    cmd: process.execPath,
    args: [
      BROKER_MAIN,
      "run",
      "--isolate",
      "--no-node-preload",
      "--home",
      home,
      "--config",
      broker.config,
      "--port",
      String(broker.port),
      "--",
      process.execPath,
      "-e",
      BRIDGE,
      socketPath,
    ],
    env: { ...process.env },
    // The jail's /tmp is its own (decision 135): run from the bench folder, which it keeps, so the
    // bridge's socket there is the one this process dials.
    cwd: dir,
    logFile: path.join(dir, `${name}-run.log`),
    ready: (line) => /^bridge (\S+)/.exec(line)?.[1],
  });
  return {
    ...broker,
    proxyUrl: value,
    socketPath,
    stop: async () => {
      await stopChild(child);
      await broker.stop();
    },
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
