import { describe, expect, it } from "vitest";
import { createLogger, logFormat } from "../../../core/log.js";
import { prettyLine } from "../../../core/log-pretty.js";

describe("log format", () => {
  it("is pretty on a terminal and JSON otherwise, unless KEYBROKER_LOG_FORMAT says", () => {
    expect(logFormat({}, true)).toBe("pretty");
    expect(logFormat({}, false)).toBe("json");
    expect(logFormat({}, undefined)).toBe("json");
    expect(logFormat({ KEYBROKER_LOG_FORMAT: "json" }, true)).toBe("json");
    expect(logFormat({ KEYBROKER_LOG_FORMAT: "Pretty" }, false)).toBe("pretty");
    expect(() => logFormat({ KEYBROKER_LOG_FORMAT: "fancy" }, true)).toThrow(/not one of pretty, json/);
  });

  it("writes one coloured line per event on a terminal, and JSON to a pipe", () => {
    const lines: string[] = [];
    const tty = { isTTY: true, write: (l: string) => lines.push(l) };
    createLogger("info", { env: {}, stream: tty }).warn(
      { provider: "openai", n: 2 },
      "pool exhausted\nfor now",
    );
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^\d\d:\d\d:\d\d\.\d{3} \u001b\[33mWARN \u001b\[39m pool exhausted for now \u001b\[2mprovider=\u001b\[22mopenai \u001b\[2mn=\u001b\[22m2\n$/,
    );
    const piped: string[] = [];
    createLogger("info", { env: {}, stream: { write: (l: string) => piped.push(l) } }).info({ a: 1 }, "hi");
    expect(JSON.parse(piped[0]!)).toMatchObject({ level: "info", a: 1, msg: "hi" });
  });

  it("leaves colour out under NO_COLOR, and shows an error by its message", () => {
    const lines: string[] = [];
    const tty = { isTTY: true, write: (l: string) => lines.push(l) };
    createLogger("info", { env: { NO_COLOR: "1" }, stream: tty }).error(
      { err: new Error("disk full") },
      "cannot write",
    );
    expect(lines[0]).toMatch(/^\d\d:\d\d:\d\d\.\d{3} ERROR cannot write err="disk full"\n$/);
  });

  it("quotes values with spaces and passes a line that is not JSON unchanged", () => {
    expect(
      prettyLine(
        '{"level":"info","time":"2026-01-02T03:04:05.678Z","msg":"m","why":"rule file changed"}',
        false,
      ),
    ).toBe('03:04:05.678 INFO  m why="rule file changed"\n');
    expect(prettyLine("not json\n", false)).toBe("not json\n");
  });

  it("refuses an unknown level, naming the valid ones", () => {
    expect(() => createLogger("verbose", { env: {} })).toThrow(
      /KEYBROKER_LOG_LEVEL="verbose" is not one of fatal, error, warn, info, debug, trace, silent/,
    );
  });
});
