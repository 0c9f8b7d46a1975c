// Upstream verification trusts the roots of the system keybroker runs on, not one distribution's
// file: here a corporate root (the fake provider's CA) named by SSL_CERT_FILE in the broker's
// environment, with no `upstream_ca` in the rule file. Without it the same broker answers 502
// upstream_tls.
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { chatThrough, type Fixture, REAL_OPENAI, rulesFor, startFixture } from "../helpers/fixture.js";
import type { FakeUpstream } from "../helpers/upstream.js";

let f: Fixture | undefined;

afterEach(async () => {
  await f?.close();
  expect(f?.leaks()).toEqual([]);
  f = undefined;
});

const withoutUpstreamCa = (u: FakeUpstream) => rulesFor(u).replace(/^upstream_ca:.*\n/m, "");

describe("system roots", () => {
  it("trusts a corporate root named by the broker's SSL_CERT_FILE, and hands it to the agent", async () => {
    f = await startFixture({
      rules: withoutUpstreamCa,
      upstreamEnv: (u) => ({ SSL_CERT_FILE: u.caPath }),
    });
    const res = await chatThrough(f);
    expect(res.status, res.text).toBe(200);
    const got = f.upstream.received.at(-1)!;
    expect(got.headers.authorization).toBe(`Bearer ${REAL_OPENAI}`);
    // The agent's bundle carries it too, for what the agent reaches through a tunnel. Its line
    // ends are the first copy's: Node 22.15+ reads SSL_CERT_FILE into its own system store (LF),
    // the file itself has CR LF.
    const lines = (pem: string) => pem.trim().replace(/\r\n/g, "\n");
    expect(lines(readFileSync(f.broker.bundlePath, "utf8"))).toContain(lines(f.upstream.ca.certPem));
  });

  it("without it, the provider's certificate is not trusted (502 upstream_tls)", async () => {
    f = await startFixture({ rules: withoutUpstreamCa });
    const res = await chatThrough(f);
    expect(res.status).toBe(502);
    expect(res.text).toContain("upstream_tls");
    expect(f.upstream.received).toEqual([]);
  });
});
