#!/usr/bin/env node
// Requests held for approval and the broker's memory (docs/reliability.md, "Approvals and
// connection cap"; decision 108): `--count` PUTs of `--mb` MB each, all matched by an approve
// rule and sent at once, each on its own connection; prints the broker's RSS before and once
// every request is either held or refused, and how many of each.
//
//   node bench/held-approvals.mjs [--count 30] [--mb 4] [--top "approvals: { max_pending: 64 }"]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { ProxyAgent, request } from "undici";
import { PLACEHOLDER, startBroker, startUpstream } from "./broker.mjs";
import { memoryMiB, stopAll } from "./procs.mjs";

const { values: opt } = parseArgs({
  options: {
    count: { type: "string", default: "30" },
    mb: { type: "string", default: "4" },
    top: { type: "string", default: "" },
  },
});
const COUNT = Number(opt.count);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kb-held-"));
const { upstream } = await startUpstream(dir);
const broker = await startBroker({
  dir,
  home: path.join(dir, "home"),
  name: "held",
  upstream,
  wildHosts: [],
  variant: {
    top: ["approvals: { timeout: 60s }", opt.top].filter(Boolean).join("\n"),
    provider: 'policy: [ { approve: { method: PUT, path: "/**" } } ]',
  },
  nodeOptions: [],
});

/** Held now and refused so far, from /metrics (the full counter is absent before decision 108). */
async function counts() {
  const res = await request(`${broker.proxyUrl}/metrics`);
  const text = await res.body.text();
  const read = (name) => Number(new RegExp(`^${name} (\\d+)`, "m").exec(text)?.[1] ?? 0);
  return { held: read("keybroker_approvals_pending"), full: read("keybroker_approvals_full_total") };
}

await sleep(1000);
const before = memoryMiB(broker.pid).rss;
const body = Buffer.alloc(Number(opt.mb) * 1_000_000, "a");
const agents = [];
const answers = [];
for (let i = 0; i < COUNT; i++) {
  const agent = new ProxyAgent({ uri: broker.proxyUrl, requestTls: { ca: broker.caPem } });
  agents.push(agent);
  answers.push(
    request(`https://localhost:${upstream.port}/v1/files/${i}`, {
      method: "PUT",
      dispatcher: agent,
      headers: { authorization: `Bearer ${PLACEHOLDER}`, "content-type": "application/octet-stream" },
      body,
    })
      .then(async (res) => {
        await res.body.dump();
        return res.statusCode;
      })
      .catch((err) => err.code ?? err.message),
  );
}
let c = await counts();
while (c.held + c.full < COUNT) {
  await sleep(200);
  c = await counts();
}
await sleep(1000);
const held = memoryMiB(broker.pid).rss;
const refused = [];
for (const [i, a] of answers.entries()) {
  const settled = await Promise.race([a, sleep(50).then(() => undefined)]);
  if (settled !== undefined) refused.push(settled);
  else void i;
}
console.log(
  JSON.stringify({
    count: COUNT,
    mb: Number(opt.mb),
    top: opt.top,
    rssBeforeMiB: before,
    rssHeldMiB: held,
    ...c,
    refusedStatuses: refused,
  }),
);
await Promise.all(agents.map((a) => a.destroy()));
await broker.stop();
await stopAll();
