// docs/spec.md §3.10, issue 24 item 5: requests held for approval are bounded in number and in bytes of
// body (approvals.max_pending, approvals.max_bytes; decision 108). Beyond either, the request is
// refused with 503 approvals_full before anything goes upstream and without more of its body
// being kept; answering a held request makes room again. Real curl clients and a raw TLS tunnel
// (for a body that is still arriving) through a real broker to a fake provider.
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { TLSSocket } from "node:tls";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type CliResult, runProcess } from "../helpers/broker.js";
import { rulesFor } from "../helpers/fixture.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { brokerError, openTunnel, parseAnswer } from "../helpers/raw.js";

const MAX_BYTES = 16 * 1024;
const BRANCH = "https://api.github.com/repos/o/r/branches/main/protection";

let f: InProcessFixture;
let ph: string;

beforeAll(async () => {
  f = await startInProcessFixture({
    rules: (u) =>
      rulesFor(
        u,
        `      - approve: { method: PUT, path: "/repos/*/*/branches/**" }
      - approve: { method: PUT, path: "/repos/*/*/hooks/**", timeout: 1s }
    pool: { retry_body_limit: 64KiB }
approvals: { timeout: 60s, max_pending: 2, max_bytes: 16KiB }
`,
      ),
  });
  ph = await f.placeholder("github");
});

afterAll(async () => {
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

function curlArgs(body: string): string[] {
  return [
    "-sS",
    "-x",
    f.broker.url,
    "--cacert",
    f.broker.bundlePath,
    "-X",
    "PUT",
    BRANCH,
    "-u",
    `x-access-token:${ph}`,
    "-H",
    "content-type: application/json",
    "--data-binary",
    body,
    "-w",
    "\n%{http_code}",
  ];
}

/** The status curl printed last, and the error type of the JSON body before it. */
function outcome(r: CliResult): { status: number; type?: string; message?: string } {
  const lines = r.stdout.trimEnd().split("\n");
  const status = Number(lines.at(-1));
  if (status < 400) return { status };
  const { error } = JSON.parse(lines.slice(0, -1).join("\n")) as { error: { type: string; message: string } };
  return { status, type: error.type, message: error.message };
}

const HELD = /for approval ([0-9a-f]{8}): to let it through/g;
const heldIds = () => [...f.broker.stderr().matchAll(HELD)].map((m) => m[1]!);

/** Resolves once the broker's log names more than `after` held requests; no polling. */
async function heldAfter(after: number): Promise<string> {
  for (;;) {
    const ids = heldIds();
    if (ids.length > after) return ids[after]!;
    await once(f.broker.logged, "data");
  }
}

/** A curl whose request the broker holds: resolves with its id once the log names it. */
async function startHeld(body: string): Promise<{ id: string; done: Promise<CliResult> }> {
  const before = heldIds().length;
  const done = new Promise<CliResult>((resolve) => {
    const child: ChildProcess = spawn("curl", curlArgs(body), { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout!.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr!.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    child.once("close", (code) => resolve({ status: code, stdout, stderr }));
  });
  return { id: await heldAfter(before), done };
}

async function deny(id: string): Promise<void> {
  const token = readFileSync(join(f.home, "admin.token"), "utf8").trim();
  const res = await request(`${f.broker.url}/__keybroker/admin/approvals/${id}/deny`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}` },
  });
  expect(res.statusCode).toBe(200);
  await res.body.dump();
}

async function pendingIds(): Promise<string[]> {
  const token = readFileSync(join(f.home, "admin.token"), "utf8").trim();
  const res = await request(`${f.broker.url}/__keybroker/admin/approvals`, {
    headers: { authorization: `Bearer ${token}` },
  });
  const { approvals } = (await res.body.json()) as { approvals: { id: string }[] };
  return approvals.map((a) => a.id).sort();
}

/** Denies each held request and waits for its client's 403. */
async function denyAll(held: { id: string; done: Promise<CliResult> }[]): Promise<void> {
  for (const h of held) {
    await deny(h.id);
    expect(outcome(await h.done)).toMatchObject({ status: 403, type: "policy_denied" });
  }
}

async function fullCount(): Promise<number> {
  const res = await request(`${f.broker.url}/metrics`);
  const text = await res.body.text();
  return Number(/^keybroker_approvals_full_total (\d+)$/m.exec(text)?.[1]);
}

/** The audit lines of requests refused with approvals_full (written asynchronously: re-read). */
async function fullLines(atLeast: number): Promise<Record<string, unknown>[]> {
  for (;;) {
    const lines = readFileSync(join(f.home, "audit", "audit.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.code === "approvals_full");
    if (lines.length >= atLeast) return lines;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The first whole answer on `tls` (its head and the body its content-length names). */
function firstAnswer(tls: TLSSocket): Promise<string> {
  let text = "";
  return new Promise((resolve) => {
    tls.on("data", (d: Buffer) => {
      text += d.toString("latin1");
      const { headers, body } = parseAnswer(text);
      if (body.length >= Number(headers["content-length"] ?? Number.POSITIVE_INFINITY)) resolve(text);
    });
  });
}

describe("approvals.max_pending and approvals.max_bytes", () => {
  it("max_pending 2: the third request gets 503 approvals_full and nothing goes upstream; answering one makes room", async () => {
    const upstreamBefore = f.upstream.received.length;
    const fullBefore = await fullCount();
    const a = await startHeld('{"n":1}');
    const b = await startHeld('{"n":2}');
    const heldBefore = heldIds().length;

    const third = outcome(await runProcess("curl", curlArgs('{"n":3}')));
    expect(third).toMatchObject({ status: 503, type: "approvals_full" });
    expect(third.message).toContain("approvals.max_pending");
    expect(heldIds()).toHaveLength(heldBefore);
    expect(await pendingIds()).toEqual([a.id, b.id].sort());
    expect(f.upstream.received.length).toBe(upstreamBefore);
    expect(await fullCount()).toBe(fullBefore + 1);
    expect((await fullLines(1)).at(-1)).toMatchObject({
      decision: "blocked",
      status: 503,
      provider: "github",
    });

    // One answered: the next request is held again.
    await denyAll([a]);
    const d = await startHeld('{"n":4}');
    expect(await pendingIds()).toEqual([b.id, d.id].sort());
    await denyAll([b, d]);
    expect(f.upstream.received.length).toBe(upstreamBefore);
  });

  it("max_bytes: a body that would pass the held bytes is refused while small ones are held", async () => {
    const upstreamBefore = f.upstream.received.length;
    const big = JSON.stringify({ blob: "x".repeat(10 * 1024) });
    const a = await startHeld(big);
    const refused = outcome(await runProcess("curl", curlArgs(big)));
    expect(refused).toMatchObject({ status: 503, type: "approvals_full" });
    expect(refused.message).toContain("approvals.max_bytes");
    // A small one still fits beside the first.
    const small = await startHeld('{"small":true}');
    expect(await pendingIds()).toEqual([a.id, small.id].sort());
    // The big one's bytes given back: the same body is held now.
    await denyAll([a]);
    const again = await startHeld(big);
    await denyAll([small, again]);
    expect(f.upstream.received.length).toBe(upstreamBefore);
  });

  it("a body still arriving is counted as it comes: refused before it ends, a declared length before a byte", async () => {
    const upstreamBefore = f.upstream.received.length;
    const heldBefore = heldIds().length;
    const auth = `Basic ${Buffer.from(`x-access-token:${ph}`).toString("base64")}`;
    const head = (framing: string) =>
      `PUT /repos/o/r/branches/main/protection HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: ${auth}\r\n${framing}\r\n`;

    // Chunked: 4 KiB chunks, never the last one. The chunk that passes 16 KiB gets the answer.
    const chunked = await openTunnel(f.broker.port, "api.github.com", f.broker.caPath);
    const answered = firstAnswer(chunked);
    chunked.write(head("Transfer-Encoding: chunked\r\n"));
    const chunk = `1000\r\n${"c".repeat(0x1000)}\r\n`;
    for (let i = 0; i < MAX_BYTES / 0x1000 + 1; i++) chunked.write(chunk);
    expect(brokerError(await answered)).toMatchObject({ status: 503, code: "approvals_full" });
    chunked.destroy();

    // A declared length beyond the room: refused with no body byte sent.
    const declared = await openTunnel(f.broker.port, "api.github.com", f.broker.caPath);
    const answer = firstAnswer(declared);
    declared.write(head(`Content-Length: ${MAX_BYTES + 1}\r\n`));
    const text = await answer;
    expect(parseAnswer(text).status).toBe(503);
    expect(brokerError(text).message).toContain("approvals.max_bytes");
    declared.destroy();

    expect(heldIds()).toHaveLength(heldBefore);
    expect(await pendingIds()).toEqual([]);
    expect(f.upstream.received.length).toBe(upstreamBefore);
  });
});

// Decision 134: a place in the room is kept at most the rule's approval timeout, body read
// included, so bodies that never finish cannot hold every place while nothing is listed.
describe("bodies that never finish", () => {
  it("a held request whose body stalls gets 408 at the rule's timeout and its place is freed", async () => {
    const upstreamBefore = f.upstream.received.length;
    const heldBefore = heldIds().length;
    const auth = `Basic ${Buffer.from(`x-access-token:${ph}`).toString("base64")}`;
    const head = (framing: string) =>
      `PUT /repos/o/r/hooks/1 HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: ${auth}\r\n${framing}\r\n`;

    // Both places taken (max_pending 2): one byte of each body, then silence.
    const squats = [];
    for (const [framing, first] of [
      ["Transfer-Encoding: chunked\r\n", "1\r\nx\r\n"],
      ["Content-Length: 100\r\n", "x"],
    ] as const) {
      const tls = await openTunnel(f.broker.port, "api.github.com", f.broker.caPath);
      const answered = firstAnswer(tls);
      tls.write(head(framing) + first);
      squats.push({ tls, answered });
    }
    for (const { tls, answered } of squats) {
      const err = brokerError(await answered);
      expect(err).toMatchObject({ status: 408, code: "request_timeout" });
      expect(err.message).toContain("did not arrive whole within 1 s");
      tls.destroy();
    }
    expect(heldIds()).toHaveLength(heldBefore);

    // The places are free again: two requests are held, and a third finds the room full.
    const a = await startHeld('{"n":1}');
    const b = await startHeld('{"n":2}');
    expect(outcome(await runProcess("curl", curlArgs('{"n":3}')))).toMatchObject({
      status: 503,
      type: "approvals_full",
    });
    await denyAll([a, b]);
    expect(f.upstream.received.length).toBe(upstreamBefore);
  });
});
