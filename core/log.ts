// Logs: pino to stderr, every serialized line passed through the secret scrubber before it is
// written (path-based redaction alone misses messages and error text). A person at a terminal
// reads one pretty line per event; anything else (a file, a pipe, a journal) gets JSON lines.
import { type Logger, pino } from "pino";
import { UsageError } from "./errors.js";
import { prettyLine } from "./log-pretty.js";
import { knownSecrets } from "./scrub.js";

export type { Logger };

export const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;
export const LOG_FORMATS = ["pretty", "json"] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

export interface LogOptions {
  readonly env?: NodeJS.ProcessEnv;
  /** Where lines go (default process.stderr); its `isTTY` picks the default format. */
  readonly stream?: { write(line: string): unknown; isTTY?: boolean };
}

/** A log level or format from the environment: a bad one is a usage error naming the valid ones. */
function choose<T extends string>(value: string, valid: readonly T[], variable: string): T {
  const v = value.trim().toLowerCase();
  if ((valid as readonly string[]).includes(v)) return v as T;
  throw new UsageError(`${variable}=${JSON.stringify(value)} is not one of ${valid.join(", ")}`);
}

/** pretty on a terminal, json otherwise; KEYBROKER_LOG_FORMAT forces one. */
export function logFormat(env: NodeJS.ProcessEnv, isTTY: boolean | undefined): LogFormat {
  const forced = env.KEYBROKER_LOG_FORMAT;
  if (forced !== undefined && forced !== "") return choose(forced, LOG_FORMATS, "KEYBROKER_LOG_FORMAT");
  return isTTY === true ? "pretty" : "json";
}

/** `level` defaults to `$KEYBROKER_LOG_LEVEL`, else info. */
export function createLogger(level?: string, opts: LogOptions = {}): Logger {
  const env = opts.env ?? process.env;
  const out = opts.stream ?? process.stderr;
  const wanted = level !== undefined && level !== "" ? level : env.KEYBROKER_LOG_LEVEL || "info";
  const chosen = choose(wanted, LOG_LEVELS, "KEYBROKER_LOG_LEVEL");
  const pretty = logFormat(env, out.isTTY) === "pretty";
  const colour = pretty && out.isTTY === true && (env.NO_COLOR ?? "") === "";
  const stream = {
    write(line: string): void {
      const scrubbed = knownSecrets.scrub(line);
      // Decoding JSON may reveal a form the first pass could not see: scrub the result too.
      out.write(pretty ? knownSecrets.scrub(prettyLine(scrubbed, colour)) : scrubbed);
    },
  };
  return pino(
    {
      level: chosen,
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: ["*.authorization", "*.password", "*.token", "*.secret"], censor: "[REDACTED]" },
    },
    stream,
  );
}
