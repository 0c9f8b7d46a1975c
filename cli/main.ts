#!/usr/bin/env node
import { UsageError, UserError } from "../core/errors.js";
// keybroker's command line: one file per command under cli/commands/.
import { knownSecrets } from "../core/scrub.js";
import { suggest } from "../rules/errors.js";
import type { Command } from "./command.js";

/**
 * The commands, each loaded when it runs: `start` then loads only what the broker needs (the
 * rule file's libraries stay out of its heap, see rules/load-isolated.ts).
 */
interface CommandEntry {
  readonly name: string;
  readonly summary: string;
  readonly load: () => Promise<Command>;
}

const COMMANDS: readonly CommandEntry[] = [
  {
    name: "init",
    summary: "create the home, the CA and a starter keybroker.yaml",
    load: async () => (await import("./commands/init.js")).init,
  },
  {
    name: "start",
    summary: "run the broker in the foreground",
    load: async () => (await import("./commands/start.js")).start,
  },
  {
    name: "stop",
    summary: "stop the broker running for this home",
    load: async () => (await import("./commands/stop.js")).stop,
  },
  {
    name: "run",
    summary: "run a command behind the broker, with placeholders instead of real keys",
    load: async () => (await import("./commands/run.js")).run,
  },
  {
    name: "env",
    summary: "print the variables an agent needs (proxy, CA bundle, placeholders)",
    load: async () => (await import("./commands/env.js")).env,
  },
  {
    name: "ca",
    summary: "the local CA: its path, its PEM, or a trust bundle",
    load: async () => (await import("./commands/ca.js")).ca,
  },
  {
    name: "check",
    summary: "validate the rule file and resolve every credential (values never printed)",
    load: async () => (await import("./commands/check.js")).check,
  },
  {
    name: "status",
    summary: "is the broker running; each provider's credentials and their state",
    load: async () => (await import("./commands/status.js")).status,
  },
  {
    name: "auth",
    summary: "credentials: explain where a key comes from, list them, reset their marks",
    load: async () => (await import("./commands/auth.js")).auth,
  },
  {
    name: "approvals",
    summary: "list the requests held for approval in the running broker",
    load: async () => (await import("./commands/approvals.js")).approvals,
  },
  {
    name: "approve",
    summary: "let a held request through (--for 10m: the same ones for a while)",
    load: async () => (await import("./commands/approvals.js")).approve,
  },
  {
    name: "deny",
    summary: "refuse a held request",
    load: async () => (await import("./commands/approvals.js")).deny,
  },
  {
    name: "admin",
    summary: "a one-time login link to the admin page (--open), or set its password",
    load: async () => (await import("./commands/admin.js")).admin,
  },
  {
    name: "redact",
    summary: "mask secrets in a transcript or log: stdin → stdout",
    load: async () => (await import("./commands/redact.js")).redact,
  },
  {
    name: "audit",
    summary: "show the audit log (tail [-f]) or check its hash chain (verify)",
    load: async () => (await import("./commands/audit.js")).audit,
  },
];

function usage(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return [
    "Usage: keybroker <command> [options]",
    "",
    "keybroker runs beside an AI agent on 127.0.0.1. The agent holds placeholders; keybroker swaps",
    "them for the real credentials on the way out, only toward the hosts each one belongs to.",
    "",
    "Commands:",
    ...COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    "",
    "Run `keybroker <command> --help` for a command's options.",
  ].join("\n");
}

/** The options every command takes, which may also come before the command's name. */
const GLOBAL_FLAGS = ["--home", "--config"];

/**
 * Splits `keybroker [--home DIR] [--config FILE] <command> [args]`: the global flags given
 * before the command are handed to it first, ahead of its own arguments (and of `run`'s `--`).
 */
function splitGlobals(argv: string[]): { name: string | undefined; rest: string[] } {
  const globals: string[] = [];
  let i = 0;
  for (; i < argv.length; i++) {
    const arg = argv[i]!;
    const flag = arg.split("=")[0]!;
    if (!GLOBAL_FLAGS.includes(flag)) break;
    if (arg.includes("=")) globals.push(arg);
    else {
      if (i + 1 >= argv.length) throw new UsageError(`${arg} needs a value`);
      globals.push(arg, argv[++i]!);
    }
  }
  return { name: argv[i], rest: [...globals, ...argv.slice(i + 1)] };
}

async function main(argv: string[]): Promise<number> {
  let name: string | undefined;
  let rest: string[];
  try {
    ({ name, rest } = splitGlobals(argv));
  } catch (err) {
    process.stderr.write(`keybroker: ${(err as Error).message}\n`);
    return 2;
  }
  if (name === undefined || name === "-h" || name === "--help" || name === "help") {
    process.stdout.write(usage() + "\n");
    return name === undefined ? 2 : 0;
  }
  if (name === "--version" || name === "-v") {
    process.stdout.write("0.1.0\n");
    return 0;
  }
  const entry = COMMANDS.find((c) => c.name === name);
  if (entry === undefined) {
    const option = name.startsWith("-");
    const close = option
      ? suggest(name.replace(/^-+/, ""), ["home", "config", "help", "version"])
      : suggest(
          name,
          COMMANDS.map((c) => c.name),
        );
    const hint = close === undefined ? "" : ` — did you mean "${option ? "--" : ""}${close}"?`;
    const more = close === undefined ? `\n${usage()}` : "(keybroker --help lists the commands)";
    process.stderr.write(`keybroker: unknown ${option ? "option" : "command"} "${name}"${hint}\n${more}\n`);
    return 2;
  }
  const command = await entry.load();
  if (rest.includes("--help") || rest.includes("-h")) {
    const dash = rest.indexOf("--");
    const own = dash === -1 ? rest : rest.slice(0, dash);
    if (own.includes("--help") || own.includes("-h")) {
      process.stdout.write(command.help + "\n");
      return 0;
    }
  }
  try {
    return await command.run(rest);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`keybroker ${name}: ${err.message}\n(see keybroker ${name} --help)\n`);
      return 2;
    }
    if (err instanceof UserError) {
      process.stderr.write(knownSecrets.scrub(`keybroker ${name}: ${err.message}\n`));
      return 1;
    }
    const system = systemErrorMessage(err);
    if (system !== undefined) {
      process.stderr.write(knownSecrets.scrub(`keybroker ${name}: ${system}\n`));
      return 1;
    }
    throw err;
  }
}

const SYSTEM_ERRORS: Record<string, string> = {
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  ENOENT: "no such file or folder",
  ENOTDIR: "a part of the path is not a folder",
  EISDIR: "is a folder, not a file",
  EEXIST: "already exists",
  EROFS: "read-only file system",
  ENOSPC: "no space left on the device",
};

/**
 * A file-system error on a path the user gave or owns (an unreadable home, a file where a folder
 * belongs): an ordinary mistake, reported with the path and no stack trace.
 */
function systemErrorMessage(err: unknown): string | undefined {
  if (!(err instanceof Error)) return undefined;
  const e = err as NodeJS.ErrnoException;
  // `cannot write …/home.key: …`, already a message, with the system error as its cause.
  const cause = e.cause as NodeJS.ErrnoException | undefined;
  if (e.code === undefined && cause?.code !== undefined && SYSTEM_ERRORS[cause.code] !== undefined)
    return `${e.message}; check the path and its permissions (--home, --config)`;
  if (e.code === undefined || e.path === undefined) return undefined;
  const what = SYSTEM_ERRORS[e.code];
  if (what === undefined) return undefined;
  return `cannot ${e.syscall ?? "use"} ${e.path}: ${what} (${e.code}); check the path and its permissions (--home, --config)`;
}

/**
 * A reader that goes away (`keybroker check | head -1`) is not an error: the rest of the
 * output is dropped and the command ends with its own exit code (docs/decisions.md, 46).
 */
function dropOutputWhenClosed(stream: NodeJS.WriteStream): void {
  stream.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code === "EPIPE" || err.code === "ERR_STREAM_DESTROYED") return;
    throw err;
  });
}
dropOutputWhenClosed(process.stdout);
dropOutputWhenClosed(process.stderr);

process.on("uncaughtException", (err) => {
  process.stderr.write(knownSecrets.scrub(`keybroker: internal error: ${err.stack ?? err.message}\n`));
  process.exit(70);
});

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: Error) => {
    process.stderr.write(knownSecrets.scrub(`keybroker: internal error: ${err.stack ?? err.message}\n`));
    process.exitCode = 70;
  },
);
