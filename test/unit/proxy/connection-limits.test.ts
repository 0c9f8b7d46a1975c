import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  checkingIntervalMs,
  defaultConnectionLimit,
  MAX_DEFAULT_CONNECTIONS,
  softFileLimit,
} from "../../../proxy/listener/connection-limits.js";

describe("the default connection cap", () => {
  it("stays well under the fd limit, and at most 4096", () => {
    expect(defaultConnectionLimit(1024)).toBe(448);
    expect(defaultConnectionLimit(20_000)).toBe(MAX_DEFAULT_CONNECTIONS);
    expect(defaultConnectionLimit(256)).toBe(64);
    expect(defaultConnectionLimit(100)).toBe(16);
    expect(defaultConnectionLimit(undefined)).toBe(MAX_DEFAULT_CONNECTIONS);
  });

  it("reads the soft limit from /proc's format", () => {
    const dir = mkdtempSync(join(tmpdir(), "kb-limits-"));
    const file = join(dir, "limits");
    writeFileSync(
      file,
      "Limit                     Soft Limit           Hard Limit           Units\n" +
        "Max open files            1024                 524288               files\n",
    );
    expect(softFileLimit(file)).toBe(1024);
    writeFileSync(file, "Max open files            unlimited            unlimited            files\n");
    expect(softFileLimit(file)).toBeUndefined();
    expect(softFileLimit(join(dir, "absent"))).toBeUndefined();
  });

  it("checks late headers often enough for the timeout to mean something", () => {
    expect(checkingIntervalMs(30_000)).toBe(1000);
    expect(checkingIntervalMs(400)).toBe(100);
    expect(checkingIntervalMs(100)).toBe(50);
  });
});
