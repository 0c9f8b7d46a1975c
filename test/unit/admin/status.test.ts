import { describe, expect, it } from "vitest";
import { formatStatus, formatUptime, type StatusReport } from "../../../admin/status.js";

const base: StatusReport = {
  running: true,
  version: "0.1.0",
  url: "http://127.0.0.1:8899",
  pid: 42,
  uptimeSeconds: 3725,
  ca: { path: "/h/ca/ca.pem", fingerprint: "AB:CD" },
  rules: "/h/keybroker.yaml",
  providers: [],
};

describe("status text", () => {
  it("gives uptime in its two largest units", () => {
    expect(formatUptime(0)).toBe("0s");
    expect(formatUptime(59)).toBe("59s");
    expect(formatUptime(3725)).toBe("1h 2m");
    expect(formatUptime(90_061)).toBe("1d 1h");
  });

  it("names version, pid and uptime, and a rejected reload", () => {
    expect(formatStatus(base).split("\n")[0]).toBe(
      "keybroker 0.1.0 running at http://127.0.0.1:8899 (pid 42), up 1h 2m",
    );
    const text = formatStatus({
      ...base,
      reload: { rejectedAt: "2026-01-02T03:04:05.000Z", message: "bad key" },
    });
    expect(text).toContain(
      "reload rejected at 2026-01-02T03:04:05.000Z, running the previous rules: bad key",
    );
  });

  it("says when there is no home or CA yet", () => {
    const text = formatStatus({ ...base, running: false, missingHome: "/nope", ca: undefined });
    expect(text).toContain("not running");
    expect(text).toContain("no keybroker home at /nope");
    expect(text).toContain("CA: none yet");
  });
});
