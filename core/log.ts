// Logs: pino to stderr, every serialized line passed through the secret scrubber before it is
// written (path-based redaction alone misses messages and error text).
import { type Logger, pino } from "pino";
import { knownSecrets } from "../audit/scrub.js";

export type { Logger };

export function createLogger(level: string = process.env.KEYBROKER_LOG_LEVEL ?? "info"): Logger {
  const stream = {
    write(line: string): void {
      process.stderr.write(knownSecrets.scrub(line));
    },
  };
  return pino(
    {
      level,
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: ["*.authorization", "*.password", "*.token", "*.secret"], censor: "[REDACTED]" },
    },
    stream,
  );
}
