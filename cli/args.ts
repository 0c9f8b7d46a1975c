// Argument parsing shared by the commands (node:util parseArgs), with usage errors → exit 2.
import { type ParseArgsConfig, parseArgs } from "node:util";
import { UsageError } from "../core/errors.js";
import { suggest } from "../rules/errors.js";

export { UsageError };

export const COMMON_OPTIONS = {
  home: { type: "string" },
  config: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const satisfies ParseArgsConfig["options"];

export const COMMON_HELP = `Common options (also accepted before the command: keybroker --home DIR status):
  --home DIR       the broker's home (default: $KEYBROKER_HOME, else ~/.keybroker)
  --config FILE    the rule file (default: $KEYBROKER_CONFIG, ./keybroker.yaml, $KEYBROKER_HOME/keybroker.yaml,
                   else the embedded default catalogue)
  -h, --help       this help

Logging (commands that run a broker): KEYBROKER_LOG_LEVEL (fatal, error, warn, info, debug,
trace, silent), KEYBROKER_LOG_FORMAT (pretty on a terminal, json otherwise).`;

type Options = NonNullable<ParseArgsConfig["options"]>;

export function parse<T extends Options>(argv: string[], options: T, allowPositionals = false) {
  const all = { ...COMMON_OPTIONS, ...options };
  const parsed = asUsage(() => parseArgs({ args: argv, options: all, allowPositionals, strict: true }), all);
  // `--home ""` would quietly mean the default home; an empty value is always a mistake.
  for (const [name, value] of Object.entries(parsed.values)) {
    if (value === "") throw new UsageError(`--${name} needs a value, got an empty one`);
  }
  return parsed;
}

function asUsage<R>(parse: () => R, options: Options): R {
  try {
    return parse();
  } catch (err) {
    throw new UsageError(usageMessage(err as Error & { code?: string }, options));
  }
}

/** parseArgs' messages, shorter, with a "did you mean" for a mistyped option. */
function usageMessage(err: Error & { code?: string }, options: Options): string {
  const names = Object.keys(options).map((n) => `--${n}`);
  switch (err.code) {
    case "ERR_PARSE_ARGS_UNKNOWN_OPTION": {
      const given = /'([^']+)'/.exec(err.message)?.[1] ?? "";
      const flag = given.split("=")[0] ?? given;
      const close = suggest(flag.replace(/^-+/, ""), Object.keys(options));
      return close === undefined
        ? `unknown option ${flag} (options: ${names.join(", ")})`
        : `unknown option ${flag} — did you mean --${close}?`;
    }
    case "ERR_PARSE_ARGS_INVALID_OPTION_VALUE": {
      const flag = /'(-[^' ]+)/.exec(err.message)?.[1];
      if (flag !== undefined && / argument missing/.test(err.message)) return `${flag} needs a value`;
      if (flag !== undefined) return `${flag} takes no value`;
      return err.message;
    }
    case "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL": {
      const arg = /'([^']*)'/.exec(err.message)?.[1];
      return arg === undefined ? err.message : `unexpected argument "${arg}"`;
    }
    default:
      return err.message;
  }
}
