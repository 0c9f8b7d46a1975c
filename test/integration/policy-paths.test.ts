// Path tricks against deny and approve rules (docs/spec.md §3.9, decision 101), written byte for byte
// inside an intercepted connection: what a rule matched is what the fake upstream received, and
// a path with more than one reading is refused with 400 before anything is sent or held.
// Providers without policy rules still get the path exactly as the client sent it.
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REAL_ANTHROPIC, REAL_GITHUB, rulesFor } from "../helpers/fixture.js";
import { type InProcessFixture, startInProcessFixture } from "../helpers/in-process.js";
import { brokerError, parseAnswer, rawExchange, tunnelExchange } from "../helpers/raw.js";

let f: InProcessFixture;
let basic: string;

beforeAll(async () => {
  f = await startInProcessFixture({
    rules: (u) =>
      rulesFor(
        u,
        `      - approve: { method: [PUT, PATCH], path: "/repos/*/*/branches/**" }
      - deny: { method: DELETE, path: "/orgs/**", case: insensitive }
  partner:
    mount: /p/partner
    upstream: https://api.anthropic.com/base
    inject: { header: x-api-key }
    credentials: [ANTHROPIC_API_KEY]
    policy:
      - deny: { method: DELETE, path: "/base/v1/files/**" }
approvals: { timeout: 60s }
`,
      ),
  });
  const ph = await f.placeholder("github");
  basic = `Basic ${Buffer.from(`x-access-token:${ph}`).toString("base64")}`;
});

afterAll(async () => {
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

/** `method target` to api.github.com with the github placeholder, bytes as written. */
function github(method: string, target: string): Promise<string> {
  const head =
    `${method} ${target} HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: ${basic}\r\n` +
    `Content-Length: 2\r\nConnection: close\r\n\r\n{}`;
  return tunnelExchange(f.broker.port, "api.github.com", f.broker.caPath, head);
}

/** What the upstream received while `send` ran. */
async function receivedDuring(send: () => Promise<string>) {
  const before = f.upstream.received.length;
  const text = await send();
  return { text, got: f.upstream.received.slice(before) };
}

const HELD = /for approval ([0-9a-f]{8}): to let it through run/g;

/** Resolves with the id of the next request the broker holds (its log line), after `seen` of them. */
async function nextHeld(seen: number): Promise<string> {
  for (;;) {
    const ids = [...f.broker.stderr().matchAll(HELD)].map((m) => m[1]!);
    if (ids.length > seen) return ids[seen]!;
    await once(f.broker.logged, "data");
  }
}

function heldSoFar(): number {
  return [...f.broker.stderr().matchAll(HELD)].length;
}

async function admin(path: string, method: "GET" | "POST" = "GET"): Promise<unknown> {
  const token = readFileSync(join(f.home, "admin.token"), "utf8").trim();
  const res = await request(`${f.broker.url}/__keybroker/admin/${path}`, {
    method,
    headers: { authorization: `Bearer ${token}` },
  });
  expect(res.statusCode).toBe(200);
  return res.body.json();
}

/**
 * Sends `method target` and expects it held: nothing upstream while it waits, the pending path
 * as given; then `approve` (admin API, or a CLI command) lets it through. Returns what the
 * upstream received.
 */
async function heldThenApproved(
  method: string,
  target: string,
  approve: (id: string) => Promise<unknown> = (id) => admin(`approvals/${id}/approve`, "POST"),
) {
  const before = f.upstream.received.length;
  const seen = heldSoFar();
  const answer = github(method, target);
  const first = await Promise.race([
    answer.then((text) => ({ answered: text })),
    nextHeld(seen).then((id) => ({ id })),
  ]);
  if ("answered" in first) throw new Error(`not held; answered:\n${first.answered}`);
  expect(f.upstream.received.length).toBe(before);
  const { approvals } = (await admin("approvals")) as { approvals: { id: string; path: string }[] };
  const pendingPath = approvals.find((a) => a.id === first.id)?.path;
  await approve(first.id);
  const text = await answer;
  expect(parseAnswer(text).status).toBe(200);
  const got = f.upstream.received.slice(before);
  expect(got).toHaveLength(1);
  return { pendingPath, got: got[0]! };
}

/** The refusal docs/spec.md §3.9 asks for: 400 bad_request with a hint, nothing sent, nothing held. */
async function expectRefused(method: string, target: string): Promise<void> {
  const seen = heldSoFar();
  const { text, got } = await receivedDuring(() => github(method, target));
  expect(got).toEqual([]);
  const err = brokerError(text);
  expect(err).toMatchObject({ status: 400, code: "bad_request" });
  expect(err.message).toContain("github has policy rules");
  expect(JSON.parse(parseAnswer(text).body).error.hint).toBeTruthy();
  expect(heldSoFar()).toBe(seen);
}

// Each of these is DELETE /repos/o/r (or below it) to a server that decodes and resolves it.
const DENIED_TRICKS = [
  "/%72epos/o/r",
  "/%72%65%70%6f%73/o/r",
  "/x/../repos/o/r",
  "/x/%2e%2e/repos/o/r",
  "/x/%2E%2e/repos/o/r",
  "/x/.%2e/repos/o/r",
  "/./repos/./o/r",
  "/%2e/repos/o/r",
  "//repos//o///r",
  "/repos/o/r/.",
  "/repos/o/r/x/..",
  "/../../repos/o/r",
  "/a#b/../repos/o/r",
  `/${"a/".repeat(2000)}${"../".repeat(2000)}repos/o/r`,
];

// Paths with more than one reading: invalid or overlong escapes, backslashes, encoded / \ NUL,
// matrix parameters, double encoding.
const AMBIGUOUS = [
  "/%72epos/o/r/%zz/..",
  "/repos/o/r/%",
  "/repos/o/r/%u002e%u002e",
  "/repos\\o\\r",
  "/x\\..\\repos/o/r",
  "/repos%5co%5Cr",
  "/x/..%2frepos/o/r",
  "/repos%2Fo%2Fr",
  "/repos/o/r%00",
  "/repos/o/r%0d%0a",
  "/x/%c0%ae%c0%ae/repos/o/r",
  "/x/%e0%80%ae%e0%80%ae/repos/o/r",
  "/repos/o/r/%ff/..",
  "/repos;x/o/r",
  "/repos;/o/r",
  "/repos%3bx/o/r",
  "/x/%252e%252e/repos/o/r",
  "/repos%252fo/r",
  `/${"a/".repeat(2000)}%zz/..`,
];

describe("deny rules match the canonical path", () => {
  for (const target of DENIED_TRICKS) {
    it(`DELETE ${target.slice(0, 60)}: 403, nothing sent`, async () => {
      const { text, got } = await receivedDuring(() => github("DELETE", target));
      expect(got).toEqual([]);
      expect(brokerError(text)).toMatchObject({ status: 403, code: "policy_denied" });
    });
  }

  for (const target of AMBIGUOUS) {
    it(`DELETE ${target.slice(0, 60)}: 400 bad_request, nothing sent`, async () => {
      await expectRefused("DELETE", target);
    });
  }

  it("a path no rule matches goes upstream in its canonical form, with the query as sent", async () => {
    const { text, got } = await receivedDuring(() =>
      github("GET", "/%72epos/o/r/./x//y/z/..?q=%2e%2e/a&b=%41"),
    );
    expect(parseAnswer(text).status).toBe(200);
    expect(got.map((r) => r.url)).toEqual(["/repos/o/r/x/y/?q=%2e%2e/a&b=%41"]);
    expect(got[0]!.headers.authorization).toBe(
      `Basic ${Buffer.from(`x-access-token:${REAL_GITHUB}`).toString("base64")}`,
    );
    const escaped = await receivedDuring(() => github("GET", "/search/caf%c3%a9/a%20b/%7euser/x%3Ay"));
    expect(escaped.got.map((r) => r.url)).toEqual(["/search/caf%C3%A9/a%20b/~user/x%3Ay"]);
    const long = await receivedDuring(() => github("GET", `/x/${"%41".repeat(3000)}`));
    expect(long.got.map((r) => r.url)).toEqual([`/x/${"A".repeat(3000)}`]);
  });

  it("case: a rule matches case as written unless it says case: insensitive", async () => {
    // /repos/** is case-sensitive: /REPOS is another path to it (GitHub's own routes are).
    const upper = await receivedDuring(() => github("DELETE", "/REPOS/o/r"));
    expect(upper.got.map((r) => r.url)).toEqual(["/REPOS/o/r"]);
    // /orgs/** says case: insensitive.
    for (const target of [
      "/orgs/acme",
      "/ORGS/acme",
      "/Orgs/acme/members/x",
      "/%4Frgs/acme",
      "/x/../oRgS/acme",
    ]) {
      const { text, got } = await receivedDuring(() => github("DELETE", target));
      expect(got).toEqual([]);
      expect(brokerError(text)).toMatchObject({ status: 403, code: "policy_denied" });
    }
  });

  it("reverse mode: the path after the mount is canonical too", async () => {
    const send = (method: string, path: string) =>
      receivedDuring(() =>
        rawExchange(
          f.broker.port,
          `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1:${f.broker.port}\r\nConnection: close\r\n\r\n`,
        ),
      );
    const denied = await send("DELETE", "/p/partner/v1/x/%2e%2e/%66iles/f1");
    expect(denied.got).toEqual([]);
    expect(brokerError(denied.text)).toMatchObject({ status: 403, code: "policy_denied" });
    const refused = await send("DELETE", "/p/partner/v1/files%2ff1");
    expect(refused.got).toEqual([]);
    expect(brokerError(refused.text)).toMatchObject({ status: 400, code: "bad_request" });
    const passed = await send("GET", "/p/partner/v1/./%66iles//f1");
    expect(passed.got.map((r) => r.url)).toEqual(["/base/v1/files/f1"]);
    expect(passed.got[0]!.headers["x-api-key"]).toBe(REAL_ANTHROPIC);
  });

  it("a provider without policy rules gets the path exactly as sent, as before", async () => {
    const ph = await f.placeholder("openai");
    for (const target of ["/v1/%6Dodels/../x", "/v1/a\\b;c=d/%zz/%2f//e", "/v1/%c0%ae/%00?x=%2e"]) {
      const { got } = await receivedDuring(() =>
        tunnelExchange(
          f.broker.port,
          "api.openai.com",
          f.broker.caPath,
          `GET ${target} HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer ${ph}\r\nConnection: close\r\n\r\n`,
        ),
      );
      expect(got.map((r) => r.url)).toEqual([target]);
    }
  });
});

describe("approve rules match the canonical path", () => {
  for (const target of [
    "/%72epos/o/r/branches/main",
    "/x/%2e%2e/repos/o/r/branches/main",
    "//repos/o/r/branches//main/./",
    "/repos/o/r/branches/main/x/..",
  ]) {
    it(`PUT ${target} is held; the person sees, and the upstream gets, the canonical path`, async () => {
      const { pendingPath, got } = await heldThenApproved("PUT", target);
      const canonical =
        target.endsWith("/") || target.endsWith("..")
          ? "/repos/o/r/branches/main/"
          : "/repos/o/r/branches/main";
      expect(pendingPath).toBe(canonical);
      expect(got.url).toBe(canonical);
      expect(got.method).toBe("PUT");
    });
  }

  for (const target of [
    "/%72epos/o/r/branches/main/%ff/..",
    "/repos\\o\\r\\branches\\main",
    "/repos/o/r/branches%2fmain",
    "/repos;x/o/r/branches/main",
    "/repos/o/r/branches/main%00",
    "/x/%c0%ae%c0%ae/repos/o/r/branches/main",
    "/x/%252e%252e/repos/o/r/branches/main",
    "/repos/o/r/branches/main/%zz/..",
  ]) {
    it(`PUT ${target}: 400, neither held nor sent`, async () => {
      await expectRefused("PUT", target);
    });
  }

  // Last: the grant lets every later request of this rule through.
  it("an approve --for grant covers canonical variants, and ambiguous paths are still refused", async () => {
    const cli = async (id: string) => {
      const r = await f.cli(["approve", id, "--for", "10m"]);
      expect(r.status, r.stderr).toBe(0);
    };
    const first = await heldThenApproved("PATCH", "/repos/o/r/branches/dev", cli);
    expect(first.got.url).toBe("/repos/o/r/branches/dev");
    const seen = heldSoFar();
    const covered = await receivedDuring(() => github("PATCH", "/x/../%72epos/o/r/branches/dev"));
    expect(parseAnswer(covered.text).status).toBe(200);
    expect(covered.got.map((r) => r.url)).toEqual(["/repos/o/r/branches/dev"]);
    expect(heldSoFar()).toBe(seen);
    await expectRefused("PATCH", "/repos/o/r/branches/dev/%ff/..");
  });
});
