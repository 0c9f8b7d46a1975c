// The broker's root, opened by a person on another machine (docs/spec.md §16: the root and the login page
// never answer an error where a form belongs). A real off-loopback peer: a network namespace of
// this test joined to the host by a veth pair, with a private /30 that exists only between the
// two ends; the broker is bound to the host end's address (client tokens, docs/spec.md §3.5) and curl
// runs inside the namespace. Plain HTTP at the root leads to /admin/, which sends the person to
// TLS, where the login page answers. Needs root and `ip netns` (CI runs as root): without them
// the test fails, it does not skip.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BrokerProcess, findSecrets, startBroker, tempHome, writeConfig } from "../helpers/broker.js";

const BOSS_TOKEN = "boss-token-off-loopback-7c1e5a9d";
const pid = process.pid;
const ns = `kb-${pid}-peer`;
const hostLink = `kb${pid}h`;
const peerLink = `kb${pid}p`;
// A /30 of 10.0.0.0/8 drawn from the pid, so tests running at once do not share one.
const net = `10.${100 + ((pid >> 14) % 100)}.${(pid >> 6) & 255}`;
const low = (pid & 63) * 4;
const hostAddress = `${net}.${low + 1}`;
const peerAddress = `${net}.${low + 2}`;

let broker: BrokerProcess | undefined;
const answers: string[] = [];

function ip(...args: string[]): string {
  return execFileSync("ip", args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

/** curl run inside the peer's namespace: what a machine on the LAN would see. */
function peerCurl(...args: string[]): string {
  const out = execFileSync("ip", ["netns", "exec", ns, "curl", "-sS", "--max-time", "10", ...args], {
    encoding: "utf8",
  });
  answers.push(out);
  return out;
}

beforeAll(async () => {
  ip("netns", "add", ns);
  ip("link", "add", hostLink, "type", "veth", "peer", "name", peerLink);
  ip("link", "set", peerLink, "netns", ns);
  ip("addr", "add", `${hostAddress}/30`, "dev", hostLink);
  ip("link", "set", hostLink, "up");
  ip("netns", "exec", ns, "ip", "addr", "add", `${peerAddress}/30`, "dev", peerLink);
  ip("netns", "exec", ns, "ip", "link", "set", peerLink, "up");
  ip("netns", "exec", ns, "ip", "link", "set", "lo", "up");
  const config = writeConfig(
    tempHome(),
    `version: 1
listen: ${hostAddress}:0
providers: {}
clients:
  boss:
    token: BOSS_TOKEN
    role: owner
`,
  );
  broker = await startBroker({ config, env: { BOSS_TOKEN } });
});

afterAll(async () => {
  await broker?.stop();
  // Each step on its own, so a failed one does not leave the others behind.
  for (const step of [() => ip("link", "del", hostLink), () => ip("netns", "del", ns)]) {
    try {
      step();
    } catch {
      // not created, or already gone with the namespace
    }
  }
  expect(ip("netns", "list")).not.toContain(ns);
  expect(findSecrets([BOSS_TOKEN], [], answers)).toEqual([]);
});

describe("the root off loopback", () => {
  it("a peer on the LAN opening http://<address>:<port>/ is led to the login page", async () => {
    const root = `http://${hostAddress}:${broker!.port}/`;
    // The first step, over plain HTTP: a redirect to the admin page, not an error.
    const first = peerCurl("-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", root);
    expect(first).toBe(`303 http://${hostAddress}:${broker!.port}/admin/`);
    // Followed as a browser would (trusting the broker's CA): the login form, over TLS.
    const out = peerCurl("-L", "--cacert", broker!.caPath, "-w", "\n%{http_code} %{url_effective}", root);
    const [status, where] = out.slice(out.lastIndexOf("\n") + 1).split(" ");
    expect(status).toBe("200");
    expect(where).toBe(`https://${hostAddress}:${broker!.port}/admin/login`);
    expect(out).toMatch(/<form method="post" action="\/admin\/login"/);
    expect(out).toContain("Password or admin token");
    // The peer is really off loopback: the broker audits a failed login from its address.
    const failed = peerCurl(
      "--cacert",
      broker!.caPath,
      "-o",
      "/dev/null",
      "-w",
      "%{http_code}",
      "--data",
      "secret=not-it",
      `https://${hostAddress}:${broker!.port}/admin/login`,
    );
    expect(failed).toBe("401");
    await expect
      .poll(() => {
        try {
          return readFileSync(`${broker!.home}/audit/security.jsonl`, "utf8");
        } catch {
          return "";
        }
      })
      .toContain(`"reason":"from ${peerAddress}: wrong password or token"`);
  });
});
