// Stopping a broker: `keybroker stop`, the last line a broker prints, and `npm start` leaving
// no orphan when it is sent SIGTERM.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { baseEnv, cliAsync, outputs, ROOT, scannedHomes, startBroker } from "../helpers/broker.js";
import { ALL_REAL, REAL_OPENAI } from "../helpers/fixture.js";

const { home } = scannedHomes(ALL_REAL);

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("keybroker stop", () => {
  it("stops the home's broker, waits for it to exit, and the broker says so", async () => {
    const h = home();
    const broker = await startBroker({ home: h, env: { OPENAI_API_KEY: REAL_OPENAI } });
    const pid = broker.child.pid!;
    const exited = once(broker.child, "exit");
    const r = await cliAsync(["stop", "--home", h]);
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(`keybroker stopped (pid ${pid}, ${broker.url})\n`);
    // stop returned only once the process had gone.
    expect(alive(pid)).toBe(false);
    const [code] = (await exited) as [number | null];
    expect(code).toBe(0);
    expect(broker.stdout()).toMatch(/keybroker stopped \(SIGTERM\)\n$/);
    expect(broker.stderr()).toContain('"signal":"SIGTERM"');
    expect(existsSync(join(h, "run", `broker-${broker.port}.json`))).toBe(false);
    await broker.stop();
  });

  it("exits 3 when no broker runs, and names the running ones when --port picks none", async () => {
    const h = home();
    const none = await cliAsync(["stop", "--home", h]);
    expect(none.status).toBe(3);
    expect(none.stderr).toContain(`no broker is running for ${h}`);
    const broker = await startBroker({ home: h });
    try {
      const other = broker.port === 65535 ? 65534 : broker.port + 1;
      const r = await cliAsync(["stop", "--home", h, "--port", String(other)]);
      expect(r.status).toBe(3);
      expect(r.stderr).toContain(`on port ${other} (running: port ${broker.port}, pid ${broker.child.pid})`);
      expect(alive(broker.child.pid!)).toBe(true);
      const exact = await cliAsync(["stop", "--home", h, "--port", String(broker.port)]);
      expect(exact.status).toBe(0);
    } finally {
      await broker.stop();
    }
  });

  it("never signals a process that only reuses a recorded pid: the record must answer as that broker", async () => {
    const h = home();
    const broker = await startBroker({ home: h });
    const path = join(h, "run", `broker-${broker.port}.json`);
    const record = readFileSync(path, "utf8");
    await broker.stop();
    // A stale record (a crash leaves one) naming this test's own pid.
    writeFileSync(path, record.replace(/"pid": \d+/, `"pid": ${process.pid}`));
    const r = await cliAsync(["stop", "--home", h]);
    expect(r.status).toBe(3);
  });
});

describe("npm start", () => {
  it("stops the broker on SIGTERM: no orphan left behind", async () => {
    const h = home();
    const npm = spawn("npm", ["start", "--silent", "--", "--home", h, "--port", "0"], {
      cwd: ROOT,
      env: baseEnv({ OPENAI_API_KEY: REAL_OPENAI }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    npm.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    npm.stderr.on("data", (d: Buffer) => {
      err += d.toString();
    });
    const exited = once(npm, "exit");
    const closed = once(npm, "close");
    while (!out.includes("listening on")) await once(npm.stdout, "data");
    const [name] = readdirSync(join(h, "run")).filter((f) => /^broker-\d+\.json$/.test(f));
    const pid = (JSON.parse(readFileSync(join(h, "run", name!), "utf8")) as { pid: number }).pid;
    expect(pid).not.toBe(npm.pid);
    expect(alive(pid)).toBe(true);
    npm.kill("SIGTERM");
    await exited;
    const orphaned = alive(pid);
    if (orphaned) process.kill(pid, "SIGKILL"); // it holds npm's output open: it must go first
    await closed;
    outputs.push(out, err);
    expect(orphaned).toBe(false);
    expect(out).toContain("keybroker stopped (SIGTERM)");
  });
});
