// A real redis-server (the Debian package) for the fleet tests: on a free loopback port, in its
// own temporary folder, persisting nothing (`--save ''`), stopped by pid. `restart()` brings it
// back on the same port, empty, as a Redis that lost its data. With `tls`, it listens for TLS
// only (rediss://), presenting the given certificate and asking clients for none.
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { cpSync, mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { loadOrCreateCa } from "../../certs/ca.js";
import { homeKey } from "../../core/home.js";
import { tempHome } from "./broker.js";

export const REDIS_SERVER = "/usr/bin/redis-server";

export interface RedisServer {
  readonly port: number;
  readonly url: string;
  readonly pid: number | undefined;
  /** Stops it (SIGTERM to its pid) and waits for it to exit. */
  stop(): Promise<void>;
  /** Starts it again on the same port, with nothing in it. */
  restart(): Promise<void>;
  /**
   * A plain client for the test to look into the server (and to play a Redis writer): its
   * password, no retries of a failed command, and connection errors ignored (the tests stop and
   * restart the server under it).
   */
  client(): Redis;
}

async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** PEM files for a TLS-only redis-server. */
export interface RedisTls {
  readonly cert: string;
  readonly key: string;
  readonly ca: string;
}

async function launch(port: number, dir: string, opts: RedisOptions): Promise<ChildProcess> {
  const { password, tls } = opts;
  const listen =
    tls === undefined
      ? ["--port", String(port)]
      : [
          "--port",
          "0",
          "--tls-port",
          String(port),
          "--tls-cert-file",
          tls.cert,
          "--tls-key-file",
          tls.key,
          "--tls-ca-cert-file",
          tls.ca,
          "--tls-auth-clients",
          "no",
        ];
  const args = [...listen, "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no"];
  if (password !== undefined) args.push("--requirepass", password);
  const child = spawn(REDIS_SERVER, args, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`redis-server did not start:\n${out}`)), 10_000);
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      if (out.includes("Ready to accept connections")) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`redis-server exited with ${code}:\n${out}`));
    });
  });
  child.removeAllListeners("exit");
  return child;
}

export interface RedisOptions {
  readonly password?: string;
  readonly tls?: RedisTls;
}

export async function startRedis(opts: RedisOptions = {}): Promise<RedisServer> {
  const dir = mkdtempSync(join(tmpdir(), "kb-redis-"));
  const port = await freePort();
  let child: ChildProcess | undefined = await launch(port, dir, opts);
  const stop = async () => {
    const c = child;
    child = undefined;
    if (c === undefined || c.exitCode !== null || c.signalCode !== null) return;
    const exited = once(c, "exit");
    process.kill(c.pid!, "SIGTERM");
    await exited;
  };
  const url = `${opts.tls === undefined ? "redis" : "rediss"}://127.0.0.1:${port}/0`;
  return {
    port,
    url,
    get pid() {
      return child?.pid;
    },
    stop,
    async restart() {
      await stop();
      child = await launch(port, dir, opts);
    },
    client() {
      const c = new Redis(url, {
        ...(opts.password === undefined ? {} : { password: opts.password }),
        maxRetriesPerRequest: 0,
      });
      c.on("error", () => {});
      return c;
    },
  };
}

/**
 * Every key in a Redis, every value read back, searched for each secret in clear and in
 * base64: what the fleet stores there must hold none (docs/spec.md §17: token values are sealed).
 */
export async function redisLeaks(raw: Redis, secrets: readonly string[]): Promise<string[]> {
  const found: string[] = [];
  let cursor = "0";
  do {
    const [next, keys] = await raw.scan(cursor, "COUNT", 1000);
    cursor = next;
    for (const key of keys) {
      const type = await raw.type(key);
      const values =
        type === "string"
          ? [(await raw.get(key)) ?? ""]
          : type === "hash"
            ? Object.entries(await raw.hgetall(key)).flat()
            : type === "zset"
              ? await raw.zrange(key, "0", "-1")
              : [`<${type}>`];
      for (const v of values) {
        for (const s of secrets) {
          if (v.includes(s) || v.includes(Buffer.from(s).toString("base64")))
            found.push(`${key} holds ${s.slice(0, 6)}…`);
        }
      }
    }
  } while (cursor !== "0");
  return found;
}

/**
 * Homes for `n` brokers of one fleet: the first one's CA and home key, made as `keybroker init`
 * makes them, copied into the others (README: Running a fleet).
 */
export function fleetHomes(n: number): string[] {
  const homes = [tempHome()];
  loadOrCreateCa(homes[0]!);
  homeKey(homes[0]!);
  for (let i = 1; i < n; i++) {
    const home = tempHome();
    cpSync(join(homes[0]!, "ca"), join(home, "ca"), { recursive: true });
    cpSync(join(homes[0]!, "home.key"), join(home, "home.key"));
    homes.push(home);
  }
  return homes;
}
