#!/usr/bin/env node
// keybroker's command line: one file per command under cli/commands/.
import { knownSecrets } from "../audit/scrub.js";
import { UserError } from "../core/errors.js";
import { UsageError } from "./args.js";
import type { Command } from "./command.js";
import { audit } from "./commands/audit.js";
import { auth } from "./commands/auth.js";
import { ca } from "./commands/ca.js";
import { check } from "./commands/check.js";
import { env } from "./commands/env.js";
import { init } from "./commands/init.js";
import { redact } from "./commands/redact.js";
import { run } from "./commands/run.js";
import { start } from "./commands/start.js";
import { status } from "./commands/status.js";

const COMMANDS: readonly Command[] = [init, start, run, env, ca, check, status, auth, redact, audit];

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
  const command = COMMANDS.find((c) => c.name === name);
  if (command === undefined) {
    process.stderr.write(`keybroker: unknown command "${name}"\n\n${usage()}\n`);
    return 2;
  }
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
