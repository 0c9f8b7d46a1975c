// Runs the real `keybroker` command (the built dist/) as a child process with its own home, and
// keeps everything it printed so tests can scan it for secrets.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { constants, cpSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { afterAll, expect } from "vitest";
import { writeTrustBundle } from "../../certs/bundle.js";
import { CA_DIR, loadOrCreateCa } from "../../certs/ca.js";

export const ROOT = resolve(import.meta.dirname, "../..");
export const CLI = join(ROOT, "dist/cli/main.js");

export function tempHome(): string {
  return mkdtempSync(join(tmpdir(), "kb-home-"));
}

let templateCa: string | undefined;

/**
 * A temporary home whose CA is already made: a copy of one made once per test process, as a
 * broker would have made it on its first start (certs/ca.ts: folder 0700, key 0600; the trust
 * bundle and its hashed folder, certs/bundle.ts). For the fixtures whose tests are about
 * something else; making an RSA CA key costs ~150 ms, the bundle's folder ~40 ms more. The tests
 * of the CA's own making (init, start on an empty home) use tempHome().
 */
export function homeWithCa(): string {
  templateCa ??= (() => {
    const home = tempHome();
    const ca = loadOrCreateCa(home);
    writeTrustBundle(ca, home);
    return dirname(ca.certPath);
  })();
  const home = tempHome();
  cpSync(templateCa, join(home, CA_DIR), { recursive: true, mode: constants.COPYFILE_EXCL });
  return home;
}

/**
 * Temporary homes for one test file: `home()` makes one; after the file's tests, every file in
 * them and every output kept is scanned for `secrets`.
 */
export function scannedHomes(secrets: readonly string[]): { home: () => string; homes: string[] } {
  const homes: string[] = [];
  afterAll(() => {
    expect(findSecrets(secrets, homes)).toEqual([]);
  });
  return {
    homes,
    home: () => {
      const h = tempHome();
      homes.push(h);
      return h;
    },
  };
}

/** A clean environment for the broker: no proxy variables or keys leaking in from the shell. */
export function baseEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, LANG: "C.UTF-8" };
  return { ...env, ...extra };
}

export interface BrokerProcess {
  readonly url: string;
  readonly port: number;
  readonly home: string;
  readonly caPath: string;
  readonly bundlePath: string;
  readonly child: ChildProcess;
  stdout(): string;
  stderr(): string;
  stop(): Promise<void>;
}

export interface StartOptions {
  readonly home?: string;
  readonly config?: string;
  readonly env?: Record<string, string>;
  readonly cwd?: string;
  readonly args?: string[];
}

/** Everything the broker wrote, collected across restarts, for the secret scan. */
export const outputs: string[] = [];
/** What printed each of `outputs` (the command), named in the scan's findings. */
const outputSources: string[] = [];

/** Keeps what a process printed for the secret scan, with what printed it (`source`). */
export function keepOutput(source: string, stdout: string, stderr?: string): void {
  outputs.push(stdout);
  outputSources.push(`${source}: stdout`);
  if (stderr === undefined) return;
  outputs.push(stderr);
  outputSources.push(`${source}: stderr`);
}

/** A command line for `keepOutput`, short enough for a finding. */
export function commandSource(command: string, args: readonly string[]): string {
  const text = [
    command === process.execPath ? "node" : command,
    ...args.map((a) => (a === CLI ? "keybroker" : a)),
  ].join(" ");
  return text.length > 160 ? `${text.slice(0, 157)}...` : text;
}

export async function startBroker(opts: StartOptions = {}): Promise<BrokerProcess> {
  const home = opts.home ?? tempHome();
  const args = [CLI, "start", "--home", home, "--port", "0", ...(opts.args ?? [])];
  if (opts.config !== undefined) args.push("--config", opts.config);
  const child = spawn(process.execPath, args, {
    cwd: opts.cwd ?? home,
    env: baseEnv(opts.env),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stdout!.on("data", (d: Buffer) => {
    out += d.toString();
  });
  child.stderr!.on("data", (d: Buffer) => {
    err += d.toString();
  });
  const url = await new Promise<string>((resolveUrl, reject) => {
    const onData = () => {
      const m = /listening on (http:\/\/[^\s]+) · CA (\S+)/.exec(out);
      if (m) {
        child.stdout!.off("data", onData);
        resolveUrl(m[1]!);
      }
    };
    child.stdout!.on("data", onData);
    child.once("exit", (code) =>
      reject(new Error(`broker exited with ${code}\nstdout:\n${out}\nstderr:\n${err}`)),
    );
  });
  const port = Number(new URL(url).port);
  let stopped = false;
  return {
    url,
    port,
    home,
    caPath: join(home, "ca", "ca.pem"),
    bundlePath: join(home, "ca", "bundle.pem"),
    child,
    stdout: () => out,
    stderr: () => err,
    async stop() {
      if (stopped) return;
      stopped = true;
      // A child killed by a signal (a test's kill -9) has a signalCode and no exitCode.
      if (child.exitCode === null && child.signalCode === null) {
        const exited = once(child, "exit");
        child.kill("SIGTERM");
        await exited;
      }
      keepOutput(commandSource(process.execPath, args), out, err);
    },
  };
}

export interface CliResult {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a keybroker command to completion. */
export function cli(
  args: string[],
  opts: { env?: Record<string, string>; cwd?: string; input?: string } = {},
): CliResult {
  const r = spawnSync(process.execPath, [CLI, ...args], {
    cwd: opts.cwd ?? tmpdir(),
    env: baseEnv(opts.env),
    encoding: "utf8",
    input: opts.input ?? "",
    timeout: 60_000,
  });
  keepOutput(commandSource(process.execPath, [CLI, ...args]), r.stdout, r.stderr);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/**
 * Runs a program to completion, collecting what it printed (kept for the secret scan too).
 * `close` waits for its output streams as well as its exit.
 */
export async function runProcess(
  command: string,
  args: string[],
  opts: { env?: Record<string, string>; cwd?: string; deadlineMs?: number } = {},
): Promise<CliResult> {
  const child = spawn(command, args, {
    cwd: opts.cwd ?? tmpdir(),
    env: baseEnv(opts.env),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  // Past the deadline the process is killed and its status is null.
  const timer =
    opts.deadlineMs === undefined ? undefined : setTimeout(() => child.kill("SIGKILL"), opts.deadlineMs);
  const [code, signal] = (await once(child, "close")) as [number | null, string | null];
  clearTimeout(timer);
  keepOutput(commandSource(command, args), stdout, stderr);
  return { status: timer !== undefined && signal === "SIGKILL" ? null : code, stdout, stderr };
}

/** Async variant of `cli`, for commands that talk to a broker started by the same test. */
export function cliAsync(
  args: string[],
  opts: { env?: Record<string, string>; cwd?: string } = {},
): Promise<CliResult> {
  return runProcess(process.execPath, [CLI, ...args], opts);
}

export function writeConfig(dir: string, yaml: string, name = "keybroker.yaml"): string {
  const path = join(dir, name);
  writeFileSync(path, yaml);
  return path;
}

function* walk(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    const st = statSync(p);
    if (st.isDirectory()) yield* walk(p);
    else if (st.isFile()) yield p;
  }
}

/** The forms a secret could be written in, each once (most keys are their own URL encoding). */
function forms(secret: string): string[] {
  return [...new Set([secret, Buffer.from(secret).toString("base64"), encodeURIComponent(secret)])];
}

/**
 * Every place a real secret was found: files under the home folders, and every output the
 * broker wrote. Tests assert this is empty.
 */
export function findSecrets(
  secrets: readonly string[],
  homes: readonly string[],
  texts: readonly string[] = outputs,
  /** Files where the secret belongs (the OAuth token store) and is not a leak. */
  allowed: (file: string) => boolean = () => false,
): string[] {
  const hits: string[] = [];
  // Which command printed it; a secret in that command line itself is left out of the finding.
  const source = (i: number): string => {
    if (texts[i] !== outputs[i] || outputSources[i] === undefined) return "";
    let text = outputSources[i]!;
    for (const secret of secrets) for (const form of forms(secret)) text = text.replaceAll(form, "[secret]");
    return ` (${text})`;
  };
  for (const secret of secrets) {
    for (const form of forms(secret)) {
      texts.forEach((t, i) => {
        if (t.includes(form)) hits.push(`output #${i}${source(i)} contains ${secret.slice(0, 6)}…`);
      });
      for (const home of homes) {
        for (const file of walk(home)) {
          if (!allowed(file) && readFileSync(file).includes(form))
            hits.push(`${file} contains ${secret.slice(0, 6)}…`);
        }
      }
    }
  }
  return hits;
}

/**
 * `args` with this home and rule file added, the way the fixtures run the CLI. `--config` is left
 * out of the commands that read no rule file, which refuse it (decision 144).
 */
export function homeArgs(args: string[], home: string, config: string): string[] {
  const readsNoRules =
    ["ca", "audit", "init", "stop"].includes(args[0] ?? "") ||
    (args[0] === "admin" && args[1] === "password");
  return readsNoRules ? [...args, "--home", home] : [...args, "--home", home, "--config", config];
}

/**
 * Fails with what to do when the user nobody cannot read the CLI (tests that run the broker or
 * `run --isolate` as another user need the checkout and node readable by others).
 */
export async function assertNobodyCanRunTheCli(): Promise<void> {
  const readable = await runProcess("runuser", [
    "-u",
    "nobody",
    "--",
    process.execPath,
    "-e",
    `require("fs").readFileSync(${JSON.stringify(CLI)})`,
  ]);
  if (readable.status !== 0) {
    throw new Error(
      `the user nobody cannot run ${process.execPath} ${CLI} (${readable.stderr.trim()}): the checkout and node must be readable by other users for this test`,
    );
  }
}
