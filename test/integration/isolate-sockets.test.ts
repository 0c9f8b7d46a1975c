// `run --isolate` and unix sockets (decision 135): a network namespace hides abstract sockets
// only, so a server outside listening on a socket file (a tmux server in /tmp, the user's bus in
// /run/user/<uid>, docker.sock in /run, the ssh agent) was a way out. The agent gets its own
// /tmp, /var/tmp, /dev/shm and /run/user/<uid>, the socket files left in /run are covered, and the
// variables naming sockets are gone; the working folder under /tmp still works.
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { connect, createServer, type Server } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cliAsync, tempHome } from "../helpers/broker.js";
import { type Fixture, rulesFor, startFixture } from "../helpers/fixture.js";

let f: Fixture;
const servers: Server[] = [];
/** /run/user/<uid>, made by this test when the system had none (removed after). */
let madeRunUser: string | undefined;

function listen(path: string): Promise<void> {
  const server = createServer((s) => s.on("error", () => {}).end("reached\n"));
  servers.push(server);
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(path, resolve);
  });
}

/** An agent in Node: connects to each path, writes what happened into the working folder. */
const PROBE = `const net = require("net"), fs = require("fs");
const paths = JSON.parse(process.argv[1]);
const vars = ["SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS", "TMUX", "TMUX_PANE", "DOCKER_HOST"].filter((v) => v in process.env);
Promise.all(paths.map((p) => new Promise((done) => {
  const s = net.connect(p);
  let got = "";
  s.on("data", (d) => { got += d; });
  s.on("end", () => done(got.trim() || "connected"));
  s.on("error", (e) => done(e.code));
}))).then((outcomes) => fs.writeFileSync("probe.json", JSON.stringify({ outcomes, vars })));`;

beforeAll(async () => {
  f = await startFixture({ rules: (u) => rulesFor(u) });
  const uid = process.getuid?.() ?? 0;
  const runUser = `/run/user/${uid}`;
  if (!existsSync(runUser)) {
    mkdirSync(runUser, { recursive: true, mode: 0o700 });
    madeRunUser = runUser;
  }
});

afterAll(async () => {
  for (const s of servers) s.close();
  if (madeRunUser !== undefined) rmSync(madeRunUser, { recursive: true, force: true });
  await f?.close();
  expect(f.leaks()).toEqual([]);
});

describe("an isolated agent and the unix sockets of servers outside", () => {
  it("cannot reach those in /tmp, /run/user/<uid>, /run or /dev/shm, nor learn their paths; the working folder under /tmp works", async () => {
    const uid = process.getuid?.() ?? 0;
    const tag = `kb-${process.pid}`;
    const project = tempHome();
    const outside = [
      join(tempHome(), `${tag}-tmux.sock`),
      `/run/user/${uid}/${tag}-bus.sock`,
      `/run/${tag}-docker.sock`,
      `/dev/shm/${tag}-shm.sock`,
    ];
    // One in the working folder: the agent's own folder stays as it is (decision 135 says so).
    const inProject = join(project, `${tag}-own.sock`);
    for (const p of [...outside, inProject]) await listen(p);
    // From outside, every one answers.
    for (const p of [...outside, inProject]) expect(await reach(p), p).toBe("reached");
    try {
      const r = await cliAsync(
        [
          "run",
          "--isolate",
          "--home",
          f.home,
          "--config",
          join(f.dir, "keybroker.yaml"),
          "--",
          "node",
          "-e",
          PROBE,
          JSON.stringify([...outside, inProject]),
        ],
        {
          cwd: project,
          env: {
            SSH_AUTH_SOCK: outside[0]!,
            TMUX: `${outside[0]},1234,0`,
            TMUX_PANE: "%1",
            DBUS_SESSION_BUS_ADDRESS: `unix:path=${outside[1]}`,
            DOCKER_HOST: `unix://${outside[2]}`,
          },
        },
      );
      expect(r.status, r.stderr).toBe(0);
      // Written inside, in the working folder under /tmp: it is the same folder outside.
      const probe = JSON.parse(readFileSync(join(project, "probe.json"), "utf8"));
      const [tmux, bus, docker, shm, own] = probe.outcomes;
      for (const [name, outcome] of [
        ["tmux", tmux],
        ["bus", bus],
        ["docker", docker],
        ["shm", shm],
      ])
        expect(["ENOENT", "ECONNREFUSED", "EACCES"], `${name}: ${outcome}`).toContain(outcome);
      expect(own).toBe("reached");
      expect(probe.vars).toEqual([]);
    } finally {
      for (const p of outside) rmSync(p, { force: true });
    }
  });
});

function reach(path: string): Promise<string> {
  return new Promise((resolve) => {
    const s = connect(path);
    let got = "";
    s.on("data", (d) => {
      got += d;
    });
    s.on("end", () => resolve(got.trim()));
    s.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? "error"));
  });
}
