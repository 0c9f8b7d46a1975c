// The `cmd` source: `cmd:pass show openai` runs an argv (no shell: no pipes, globs or variable
// expansion) and its stdout, trailing newline trimmed, is the secret. A password manager's CLI
// can be slow or locked, so answers are cached like Infisical's (refresh-cache.ts). Errors name
// the command and how it ended, never what it printed: that could be the secret.
import { spawn } from "node:child_process";
import { splitCommandLine } from "../core/command-line.js";
import { childEnvironment } from "../core/initial-environ.js";
import { RefreshCache, seconds } from "./refresh-cache.js";
import { fromValue, type Lookup, type SecretSource } from "./source.js";

export interface CmdSourceOptions {
  readonly env: NodeJS.ProcessEnv;
  readonly cwd?: string;
  /** The command is killed after this long. */
  readonly timeoutMs: number;
  readonly ttlMs: number;
  readonly graceMs: number;
  readonly warn: (message: string) => void;
  readonly now?: () => number;
}

/** More than this on stdout is not a secret: the command is stopped. */
const MAX_OUTPUT = 64 * 1024;

/** Runs `argv` and resolves with its stdout; rejects with a message that holds none of its output. */
export function runCommand(
  argv: readonly string[],
  opts: { env: NodeJS.ProcessEnv; cwd?: string; timeoutMs: number; label?: string },
): Promise<string> {
  const [file, ...args] = argv;
  if (file === undefined) return Promise.reject(new Error("the command line is empty"));
  const shown = `(${opts.label ?? argv.join(" ")})`;
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, {
      env: childEnvironment(opts.env),
      ...(opts.cwd === undefined ? {} : { cwd: opts.cwd }),
      stdio: ["ignore", "pipe", "ignore"],
      shell: false,
      // Its own process group, so that a timeout also stops whatever it started.
      detached: true,
      windowsHide: true,
    });
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const finish = (err: Error | undefined, value?: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err === undefined) resolve(value ?? "");
      else reject(err);
    };
    const kill = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
      } catch {
        child.kill("SIGKILL");
      }
    };
    const timer = setTimeout(() => {
      kill();
      finish(
        new Error(`the command ${shown} did not finish within ${seconds(opts.timeoutMs)} and was stopped`),
      );
    }, opts.timeoutMs);
    child.stdout?.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_OUTPUT) {
        kill();
        finish(new Error(`the command ${shown} printed more than ${MAX_OUTPUT} bytes: that is not a secret`));
      } else chunks.push(chunk);
    });
    child.once("error", (err: NodeJS.ErrnoException) => {
      const why = err.code === "ENOENT" ? "not found (check the path, or PATH)" : (err.code ?? "failed");
      finish(new Error(`cannot run the command ${shown}: ${why}`));
    });
    child.once("close", (code, signal) => {
      if (code === 0)
        finish(
          undefined,
          Buffer.concat(chunks)
            .toString("utf8")
            .replace(/\r?\n$/, ""),
        );
      else {
        const how = code === null ? `was killed by ${signal ?? "a signal"}` : `exited with status ${code}`;
        finish(
          new Error(
            `the command ${shown} ${how} (what it printed is not shown, as it may hold the secret: run it yourself to see why)`,
          ),
        );
      }
    });
  });
}

export class CmdSource implements SecretSource {
  readonly name = "cmd";
  readonly #cache: RefreshCache<string>;

  constructor(opts: CmdSourceOptions) {
    const run = async (line: string) =>
      runCommand(splitCommandLine(line), {
        label: `cmd:${line}`,
        env: opts.env,
        ...(opts.cwd === undefined ? {} : { cwd: opts.cwd }),
        timeoutMs: opts.timeoutMs,
      });
    this.#cache = new RefreshCache(run, {
      ttlMs: opts.ttlMs,
      graceMs: opts.graceMs,
      // The command's own timeout reports first, with the better message.
      timeoutMs: opts.timeoutMs + 1_000,
      ...(opts.now === undefined ? {} : { now: opts.now }),
      onStale: (_line, why, until) =>
        opts.warn(`${why}: using the value it gave before until ${new Date(until).toISOString()}`),
      onExpired: (_line, why) =>
        opts.warn(`${why}: the value it gave before is past its grace period and no longer used`),
    });
  }

  async lookup(line: string): Promise<Lookup> {
    const answer = await this.#cache.get(line, { waitFor: (previous) => previous !== "" });
    const { expiresAt } = answer;
    if (answer.kind === "error") return { kind: "error", message: answer.message, expiresAt };
    const lookup = fromValue(answer.data);
    if (lookup.kind !== "found") return { ...lookup, expiresAt };
    return answer.stale === undefined
      ? { kind: "found", value: lookup.value, expiresAt }
      : { kind: "found", value: lookup.value, stale: answer.stale, expiresAt };
  }
}
