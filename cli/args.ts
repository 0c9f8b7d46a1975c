// Argument parsing shared by the commands (node:util parseArgs), with usage errors → exit 2.
import { type ParseArgsConfig, parseArgs } from "node:util";

export class UsageError extends Error {
  override name = "UsageError";
}

export const COMMON_OPTIONS = {
  home: { type: "string" },
  config: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const satisfies ParseArgsConfig["options"];

export const COMMON_HELP = `Common options:
  --home DIR       the broker's home (default: $KEYBROKER_HOME, else ~/.keybroker)
  --config FILE    the rule file (default: $KEYBROKER_CONFIG, ./keybroker.yaml, $KEYBROKER_HOME/keybroker.yaml,
                   else the embedded default catalogue)
  -h, --help       this help`;

export function parse<T extends NonNullable<ParseArgsConfig["options"]>>(
  argv: string[],
  options: T,
  allowPositionals = false,
) {
  try {
    return parseArgs({
      args: argv,
      options: { ...COMMON_OPTIONS, ...options },
      allowPositionals,
      strict: true,
    });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}
