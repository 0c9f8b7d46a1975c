// Proxied request latency while the admin page is flooded with password guesses (decision 105,
// docs/reliability.md "Hardening 3"). Starts the bench upstream and one broker with an admin
// password, then times sequential proxied POSTs (a new connection each: CONNECT, both TLS
// handshakes) first at rest, then while 48 guesses at a time arrive from 48 loopback addresses
// (127.0.1.x, so the per-address limit does not stop them at once), sent by a process of their
// own so the timing client's event loop stays free; a guesser refused with 429 waits 50 ms before
// its next guess. Prints p50/p99/max in ms.
//   node bench/admin-login-load.mjs [samples=40]
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { BROKER_MAIN, startBroker, startUpstream } from "./broker.mjs";
import { makeTarget } from "./client.mjs";
import { stopAll } from "./procs.mjs";
import { summarize } from "./stats.mjs";

const SAMPLES = Number(process.argv[2] ?? 40);
const GUESSERS = 48;

function guess(port, from) {
  return new Promise((resolve) => {
    const body = "secret=wrong-guess-for-the-bench";
    const req = http.request(
      {
        host: "127.0.0.1",
        port,
        localAddress: from,
        method: "POST",
        path: "/admin/login",
        agent: false,
        headers: { "content-type": "application/x-www-form-urlencoded", "content-length": body.length },
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode));
      },
    );
    req.on("error", () => resolve(0));
    req.end(body);
  });
}

/** The guessing process: `node bench/admin-login-load.mjs guess <port>`, until stdin closes. */
async function guessUntilStdinEnds(port) {
  let flooding = true;
  process.stdin.on("end", () => {
    flooding = false;
  });
  process.stdin.resume();
  const answers = new Map();
  await Promise.all(
    Array.from({ length: GUESSERS }, async (_, i) => {
      while (flooding) {
        const status = await guess(port, `127.0.1.${i + 1}`);
        answers.set(status, (answers.get(status) ?? 0) + 1);
        // A refusal comes at once: pausing keeps this a password flood, not a flood of requests.
        if (status === 429) await new Promise((r) => setTimeout(r, 50));
      }
    }),
  );
  console.log(`guess answers: ${[...answers].map(([k, v]) => `${k} × ${v}`).join(", ")}`);
}

async function timed(target, n) {
  const samples = [];
  for (let i = 0; i < n; i++) {
    const dispatcher = target.dispatcher();
    const t0 = performance.now();
    await target.post(dispatcher);
    samples.push(performance.now() - t0);
    await dispatcher.close();
  }
  return summarize(samples);
}

if (process.argv[2] === "guess") {
  await guessUntilStdinEnds(Number(process.argv[3]));
  process.exit(0);
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kb-bench-login-"));
try {
  const { upstream } = await startUpstream(dir);
  const home = path.join(dir, "home");
  const broker = await startBroker({
    dir,
    home,
    name: "login",
    upstream,
    wildHosts: [],
    variant: {},
    nodeOptions: [],
  });
  const set = spawnSync(process.execPath, [BROKER_MAIN, "admin", "password", "--home", home], {
    input: "the bench password 1234\n",
    encoding: "utf8",
  });
  if (set.status !== 0) throw new Error(set.stderr);
  const target = makeTarget({ name: "keybroker", upstream, broker });
  await timed(target, 5); // warm up
  const rest = await timed(target, SAMPLES);
  const guesser = spawn(process.execPath, [process.argv[1], "guess", String(broker.port)], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  let said = "";
  guesser.stdout.on("data", (d) => {
    said += d;
  });
  const busy = await timed(target, SAMPLES);
  guesser.stdin.end();
  await new Promise((resolve) => guesser.on("exit", resolve));
  const row = (label, s) =>
    `${label.padEnd(34)} p50 ${s.p50.toFixed(0).padStart(5)}  p99 ${s.p99.toFixed(0).padStart(5)}  max ${s.max.toFixed(0).padStart(5)} ms`;
  console.log(row("at rest", rest));
  console.log(row(`${GUESSERS} guesses at a time`, busy));
  console.log(said.trim());
} finally {
  await stopAll();
  fs.rmSync(dir, { recursive: true, force: true });
}
