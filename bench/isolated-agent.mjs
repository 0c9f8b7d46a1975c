// The load generator of the `isolated` variant, run INSIDE an isolated launch as its command
// (bench/isolated.mjs): it reaches the broker exactly as an agent there does, through the proxy
// variables `keybroker run --isolate` gave it, with no bridge of the bench's own.
//
// It talks to the bench over its stdin and stdout, one JSON object a line:
//   ← {"cmd":"init","upstreamPort":N,"caPem":"..."}   → {"ready":true}
//   ← {"cmd":"load","conc":N,"seconds":S,"lat":bool}   → {"ok","seconds","sent","errors","lat"?,"cpu_s"}
//   ← {"cmd":"reset"}                                  → {"reset":true} (a new dispatcher: new connections)
// Stdin closing ends it. Latencies go back rounded to 10 µs, so a run's list stays small.
import readline from "node:readline";
import { makeTarget, postFor } from "./client.mjs";

const proxyUrl = process.env.HTTPS_PROXY;
if (!proxyUrl) {
  process.stderr.write("isolated-agent: no HTTPS_PROXY: run it under keybroker run --isolate\n");
  process.exit(2);
}

let target;
let dispatcher;
const say = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);

const lines = readline.createInterface({ input: process.stdin });
console.log("agent ready");
for await (const line of lines) {
  const m = JSON.parse(line);
  if (m.cmd === "init") {
    target = makeTarget({
      name: "keybroker",
      upstream: { port: m.upstreamPort },
      broker: { proxyUrl, caPem: m.caPem },
    });
    dispatcher = target.dispatcher();
    say({ ready: true });
  } else if (m.cmd === "reset") {
    await dispatcher.close();
    dispatcher = target.dispatcher();
    say({ reset: true });
  } else if (m.cmd === "load") {
    const sent0 = target.sent;
    const errors0 = target.errors.length;
    const lat = m.lat ? [] : undefined;
    const c0 = process.cpuUsage();
    const r = await postFor(target, dispatcher, m.conc, m.seconds, lat);
    const c = process.cpuUsage(c0);
    say({
      ...r,
      sent: target.sent - sent0,
      errors: target.errors.slice(errors0, errors0 + 20),
      error_count: target.errors.length - errors0,
      cpu_s: (c.user + c.system) / 1e6,
      ...(lat ? { lat: lat.map((x) => Math.round(x * 100) / 100) } : {}),
    });
  }
}
await dispatcher?.close();
