// `keybroker run --isolate` (docs/spec.md §20): an agent in its own user, mount, PID and network
// namespaces tries every way to read a secret or get around the proxy (every process's
// environment, command line and memory; the .env, the rule file, every file of the home and
// the admin token; `keybroker approve` on a request held for another client; direct TCP to the
// upstream and to the host's own addresses; DNS) and finds nothing and changes nothing, while
// curl, Python requests and the openai Node SDK in the same jail get 200 with the real key.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { networkInterfaces } from "node:os";
import { join } from "node:path";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI, cliAsync, findSecrets, ROOT, runProcess, tempHome } from "../helpers/broker.js";
import {
  ALL_REAL,
  type Fixture,
  REAL_GITHUB,
  REAL_OPENAI,
  rulesFor,
  startFixture,
} from "../helpers/fixture.js";
import { until } from "../helpers/fleet.js";
import { rawExchange } from "../helpers/raw.js";

const FILE_SECRET = "kb-file-secret-3c9e1a7f5d2b8046";
const DOTENV_SECRET = "kb-dotenv-secret-8e2c4a6f0b1d3957";
const CLIENTS = join(ROOT, "test/fixtures/clients");
const BRANCH = "https://api.github.com/repos/o/r/branches/main/protection";

let f: Fixture;
/** The agent's project folder: its .env and a file: secret sit here, as users keep them. */
let project: string;
/** A server on every address of the host, reachable from outside the jail. */
let everywhere: Server;

beforeAll(async () => {
  project = tempHome();
  writeFileSync(join(project, ".env"), `DOTKEY=${DOTENV_SECRET}\n`);
  writeFileSync(join(project, "filekey.txt"), `${FILE_SECRET}\n`);
  f = await startFixture({
    rules: (u) =>
      rulesFor(
        u,
        `      - approve: { method: PUT, path: "/repos/*/*/branches/**" }
  filekey:
    hosts: [tunnel.test]
    credentials: ["file:${project}/filekey.txt"]
    placeholder: { env: FILEKEY_TOKEN }
  dotkey:
    hosts: [dotenv.test]
    credentials: ["dotenv:DOTKEY"]
    placeholder: { env: DOTKEY_TOKEN }
sources: { dotenv: "${project}/.env" }
approvals: { timeout: 120s }
`,
      ),
  });
  everywhere = createServer((s) => s.on("error", () => {}).end("hello\n"));
  await new Promise<void>((resolve) => everywhere.listen(0, "0.0.0.0", resolve));
});

afterAll(async () => {
  everywhere?.close();
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

function* walk(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) yield* walk(p);
    else yield p;
  }
}

/** The host's own addresses other than loopback (the jail has a loopback of its own). */
function hostAddresses(): string[] {
  return Object.values(networkInterfaces())
    .flat()
    .filter((a) => a !== undefined && a.family === "IPv4" && !a.internal)
    .map((a) => a!.address);
}

async function pendingIds(): Promise<string[]> {
  const token = readFileSync(join(f.home, "admin.token"), "utf8").trim();
  const res = await request(`${f.broker.url}/__keybroker/admin/approvals`, {
    headers: { authorization: `Bearer ${token}` },
  });
  const body = (await res.body.json()) as { approvals: { id: string }[] };
  return body.approvals.map((a) => a.id);
}

describe("an agent under run --isolate", () => {
  it("finds no secret and no way around the broker, while curl, requests and the openai SDK get through", async () => {
    // A request of the default client, held for a person: the agent will try to approve it.
    const agent = f.proxyAgent();
    const held = request(BRANCH, {
      method: "PUT",
      dispatcher: agent,
      headers: { authorization: `Bearer ${await f.placeholder("github")}` },
      body: "{}",
    });
    const [approveId] = await until(async () => {
      const ids = await pendingIds();
      return ids.length > 0 && ids;
    }, "the held request");

    const addresses = hostAddresses();
    // From outside, the host's addresses answer: inside they must not.
    for (const host of addresses) {
      const r = await runProcess(process.execPath, [
        "-e",
        `require("net").connect(${port(everywhere)}, "${host}").on("connect", () => process.exit(0))`,
      ]);
      expect(r.status, `${host} should answer from outside the jail`).toBe(0);
    }
    // In the working folder: the agent's /tmp is its own (decision 135).
    const out = mkdtempSync(join(project, "out-"));
    const snoopOut = join(out, "snoop");
    mkdirSync(snoopOut);
    const config = join(f.dir, "keybroker.yaml");
    const plan = {
      out: snoopOut,
      files: [...walk(f.home), config, join(project, ".env"), join(project, "filekey.txt")],
      cli: CLI,
      home: f.home,
      approveId,
      tcp: [
        { host: "127.0.0.1", port: f.upstream.port },
        ...addresses.map((host) => ({ host, port: port(everywhere) })),
        ...addresses.map((host) => ({ host, port: f.broker.port })),
      ],
      dnsName: "api.openai.com",
    };
    const planPath = join(out, "plan.json");
    writeFileSync(planPath, JSON.stringify(plan));
    const script = [
      `node ${CLIENTS}/isolated-snoop.mjs ${planPath}`,
      `curl -sS -o /dev/null -w '%{http_code}' -X POST https://api.openai.com/v1/chat/completions -H "Authorization: Bearer $OPENAI_API_KEY" -H 'content-type: application/json' -d '{"model":"m","messages":[]}' > ${out}/curl.txt`,
      `python3 ${CLIENTS}/requests-chat.py > ${out}/requests.txt`,
      `node ${CLIENTS}/openai-chat.mjs > ${out}/openai.txt`,
    ].join(" && ");
    const before = f.upstream.received.length;
    const r = await cliAsync(
      ["run", "--isolate", "--home", f.home, "--config", config, "--", "sh", "-c", script],
      {
        cwd: project,
      },
    );
    expect(r.status, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`).toBe(0);

    const report = JSON.parse(readFileSync(join(snoopOut, "report.json"), "utf8"));
    // Nothing read holds a secret, in any form; the admin token and the home key included.
    const adminToken = readFileSync(join(f.home, "admin.token"), "utf8").trim();
    const homeKey = readFileSync(join(f.home, "home.key")).toString("base64");
    const everything = [...ALL_REAL, FILE_SECRET, DOTENV_SECRET, adminToken, homeKey];
    expect(findSecrets(everything, [snoopOut], [r.stdout, r.stderr])).toEqual([]);
    // Of the files, only hidden (empty) ones or refusals; the home's listing is empty.
    expect(
      report.read.filter(
        (w: string) => !w.startsWith("/proc/") && w !== "approve output" && !w.endsWith("(output)"),
      ),
    ).toEqual([]);
    // No process outside the jail is visible: the agent sees its relay (PID 1) and itself.
    expect(Math.max(...report.procs)).toBeLessThan(100);
    // keybroker approve failed and the request is still held.
    expect(report.approve.status, report.approve.stderr).not.toBe(0);
    expect(await pendingIds()).toContain(approveId);
    // No direct connection, no DNS.
    for (const t of report.tcp) expect(t.outcome, `${t.host}:${t.port}`).not.toBe("connected");
    expect(report.tcp.length).toBeGreaterThan(0);
    for (const d of report.dns) expect(d.error, JSON.stringify(d)).toBeDefined();

    // The real clients, in the same jail, through the broker: 200 with the real key upstream.
    expect(readFileSync(join(out, "curl.txt"), "utf8")).toBe("200");
    expect(JSON.parse(readFileSync(join(out, "requests.txt"), "utf8")).status).toBe(200);
    expect(JSON.parse(readFileSync(join(out, "openai.txt"), "utf8")).status).toBe(200);
    const got = f.upstream.received.slice(before).filter((g) => g.host === "api.openai.com");
    expect(got.map((g) => g.headers.authorization)).toEqual(Array(3).fill(`Bearer ${REAL_OPENAI}`));

    // The held request is answered from outside, by the owner; nothing else changed.
    await answer(approveId!, "deny");
    const res = await held;
    expect(res.statusCode).toBe(403);
    await res.body.dump();
    await agent.close();
    expect(findSecrets([REAL_GITHUB], [out])).toEqual([]);
  });

  it("cannot use the admin API with its own launch token, and its token dies with it", async () => {
    // In the working folder: the agent's /tmp is its own (decision 135).
    const out = mkdtempSync(join(project, "out-"));
    const config = join(f.dir, "keybroker.yaml");
    const r = await cliAsync(
      [
        "run",
        "--isolate",
        "--home",
        f.home,
        "--config",
        config,
        "--",
        "sh",
        "-c",
        `echo "$HTTPS_PROXY" > ${out}/proxy; curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:${f.broker.port}/__keybroker/admin/approvals" -H "authorization: Bearer $(echo "$HTTPS_PROXY" | sed 's|.*:\\(.*\\)@.*|\\1|')" > ${out}/admin`,
      ],
      { cwd: project },
    );
    expect(r.status, r.stderr).toBe(0);
    expect(["403", "407"]).toContain(readFileSync(join(out, "admin"), "utf8"));
    // After the launch, its proxy credentials no longer authenticate.
    const proxy = readFileSync(join(out, "proxy"), "utf8").trim();
    expect(new URL(proxy).username).toMatch(/^launch-[0-9a-f]+$/);
    const u = new URL(proxy);
    const basic = Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString(
      "base64",
    );
    const answer = await rawExchange(
      f.broker.port,
      `CONNECT api.openai.com:443 HTTP/1.1\r\nhost: api.openai.com:443\r\nproxy-authorization: Basic ${basic}\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 407 /);
  });
});

function port(server: Server): number {
  return (server.address() as { port: number }).port;
}

async function answer(id: string, verb: "approve" | "deny"): Promise<void> {
  const token = readFileSync(join(f.home, "admin.token"), "utf8").trim();
  const res = await request(`${f.broker.url}/__keybroker/admin/approvals/${id}/${verb}`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}` },
  });
  expect(res.statusCode).toBe(200);
  await res.body.dump();
}
