// A keybroker command run the way a user runs an interactive one: the test reads what it prints
// as it comes (a URL to open, a code to enter) and answers on its stdin. What it printed joins
// the outputs of the secret scan.
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { createServer } from "node:net";
import { join } from "node:path";
import { baseEnv, CLI, commandSource, keepOutput } from "./broker.js";

export interface Running {
  readonly child: ChildProcess;
  out(): string;
  err(): string;
  /** What it printed on stdout (or on stderr), once it matches. */
  waitFor(pattern: RegExp, from?: "stdout" | "stderr"): Promise<RegExpExecArray>;
  exit(): Promise<number | null>;
}

/** Starts `keybroker <args> --home <home> --config <dir>/keybroker.yaml`. */
export function startCli(f: { home: string; dir: string }, args: string[]): Running {
  return startProcess(process.execPath, [
    CLI,
    ...args,
    "--home",
    f.home,
    "--config",
    join(f.dir, "keybroker.yaml"),
  ]);
}

/** Starts any program (`keybroker run -- <agent>` for one), read as it prints. */
export function startProcess(
  command: string,
  args: string[],
  opts: { env?: Record<string, string>; cwd?: string } = {},
): Running {
  const child = spawn(command, args, {
    env: baseEnv(opts.env),
    cwd: opts.cwd,
    stdio: ["pipe", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  const waiters: (() => void)[] = [];
  const wake = () => {
    for (const w of waiters.splice(0)) w();
  };
  child.stdout!.on("data", (d: Buffer) => {
    out += d.toString();
    wake();
  });
  child.stderr!.on("data", (d: Buffer) => {
    err += d.toString();
    wake();
  });
  const exited = once(child, "close").then(([code]) => {
    keepOutput(commandSource(command, args), out, err);
    wake();
    return code as number | null;
  });
  return {
    child,
    out: () => out,
    err: () => err,
    async waitFor(pattern, from = "stdout") {
      for (;;) {
        const m = pattern.exec(from === "stdout" ? out : err);
        if (m !== null) return m;
        if (child.exitCode !== null) throw new Error(`exited before ${pattern}: ${out}\n${err}`);
        await new Promise<void>((r) => waiters.push(r));
      }
    },
    exit: () => exited,
  };
}

/** A loopback port free now (for a login callback the test must know in advance). */
export async function freePort(): Promise<number> {
  const s = createServer().listen(0, "127.0.0.1");
  await once(s, "listening");
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}
