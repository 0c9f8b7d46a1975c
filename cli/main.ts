#!/usr/bin/env node
// keybroker's command line: one file per command under cli/commands/.
import { knownSecrets } from "../audit/scrub.js";
import { UserError } from "../core/errors.js";
import { UsageError } from "./args.js";
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

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
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
    process.stderr.write(`keybroker: unknown command "${name}"\n\n${usage()}\n`);
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
    throw err;
  }
}

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
