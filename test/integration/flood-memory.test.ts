// docs/spec.md §3.8, issue 14: memory is returned after a connection flood. A broker holds a flood of
// idle CONNECTs (answered 200, no ClientHello), they close at once, and its resident memory is
// measured before, while they are held, and once they have closed and the broker has given back
// what the surge grew (docs/reliability.md, "Memory after a flood"; decision 55). Before the fix
// each closing connection made OpenSSL set up its buffers, which glibc then kept: RSS ended
// 109-121 MiB above where it started with 2,500 connections.
import { readdirSync, readFileSync } from "node:fs";
import type { Socket } from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type Fixture, startFixture } from "../helpers/fixture.js";
import { connectThrough, parseAnswer, tunnelExchange } from "../helpers/raw.js";

const FLOOD = 2500;
/** How far above its idle RSS the broker may stay once the flood has gone. */
const MARGIN_MIB = 40;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let f: Fixture;

beforeAll(async () => {
  f = await startFixture({
    // Held for as long as the test needs; the cap well above the flood.
    extraRules: `timeouts: { handshake: 60s }\nlimits: { connections: ${FLOOD + 200} }\n`,
  });
});

afterAll(async () => {
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

function rssMiB(pid: number): number {
  const kib = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  return Number(kib) / 1024;
}

/** One real request inside an intercepted connection; resolves with its status. */
async function modelsThroughTunnel(): Promise<number> {
  const ph = await f.placeholder("openai");
  const text = await tunnelExchange(
    f.broker.port,
    "api.openai.com",
    f.broker.caPath,
    `GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer ${ph}\r\nConnection: close\r\n\r\n`,
  );
  return parseAnswer(text).status;
}

const openFds = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;

it(`gives the memory of ${FLOOD} idle CONNECTs back once they have closed`, async () => {
  const pid = f.broker.child.pid!;
  // One real intercepted request first: TLS, the leaf and the pipeline are warm before "idle".
  expect(await modelsThroughTunnel()).toBe(200);
  await sleep(500);
  const idleFds = openFds(pid);
  const before = rssMiB(pid);

  const flood: Socket[] = [];
  for (let i = 0; i < FLOOD; i += 100) {
    const batch = Array.from({ length: Math.min(100, FLOOD - i) }, () =>
      connectThrough(f.broker.port, "api.openai.com:443"),
    );
    flood.push(...(await Promise.all(batch)));
  }
  // A few of the broker's own descriptors (an upstream keep-alive connection) may come and go.
  const SLACK_FDS = 10;
  expect(openFds(pid)).toBeGreaterThanOrEqual(idleFds + FLOOD - SLACK_FDS);
  const held = rssMiB(pid);

  // The clients leave at once, as a flood's do.
  for (const s of flood) s.destroy();
  while (openFds(pid) > idleFds + SLACK_FDS) await sleep(100);
  // The broker gives the heap back a second after the surge closed, and once more a second later.
  await sleep(3000);
  const after = rssMiB(pid);

  console.log(
    `RSS MiB: idle ${before.toFixed(1)}, ${FLOOD} held ${held.toFixed(1)}, after ${after.toFixed(1)}`,
  );
  expect(after - before).toBeLessThan(MARGIN_MIB);
  // The broker still serves.
  expect(await modelsThroughTunnel()).toBe(200);
});
