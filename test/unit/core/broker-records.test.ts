import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  type BrokerRecord,
  brokerRecordOnPort,
  readBrokerRecords,
  removeBrokerRecord,
  writeBrokerRecord,
} from "../../../core/broker-records.js";

function record(port: number, pid = process.pid): BrokerRecord {
  return {
    pid,
    port,
    url: `http://127.0.0.1:${port}`,
    host: "127.0.0.1",
    version: "0.1.0",
    ca: "/ca.pem",
    bundle: "/bundle.pem",
    rules: "/keybroker.yaml",
    startedAt: new Date().toISOString(),
  };
}

describe("broker records", () => {
  it("keeps one record per broker, by port, and removes only its own", () => {
    const home = mkdtempSync(join(tmpdir(), "kb-rec-"));
    writeBrokerRecord(home, record(9001));
    writeBrokerRecord(home, record(9002));
    expect(readBrokerRecords(home).map((r) => r.port)).toEqual([9001, 9002]);
    expect(brokerRecordOnPort(home, 9002)?.pid).toBe(process.pid);
    removeBrokerRecord(home, 9001, process.pid + 1_000_000);
    expect(readBrokerRecords(home)).toHaveLength(2);
    removeBrokerRecord(home, 9001);
    expect(readBrokerRecords(home).map((r) => r.port)).toEqual([9002]);
  });

  it("drops the record of a process that no longer exists", () => {
    const home = mkdtempSync(join(tmpdir(), "kb-rec-"));
    const dead = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], {
      encoding: "utf8",
    });
    writeBrokerRecord(home, record(9003, Number(dead.stdout)));
    writeFileSync(join(home, "run", "broker-9004.json"), "{ torn");
    expect(readBrokerRecords(home)).toEqual([]);
    expect(readdirSync(join(home, "run"))).toEqual(["broker-9004.json"]);
  });

  it("reads a home that does not exist without creating it", () => {
    const home = join(tmpdir(), "kb-rec-missing-home");
    expect(readBrokerRecords(home)).toEqual([]);
    expect(existsSync(home)).toBe(false);
  });
});
