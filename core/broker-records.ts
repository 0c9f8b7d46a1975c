// Where each running broker of a home says where it listens: one file per broker,
// `$home/run/broker-<port>.json`, written when it starts listening and removed when it stops.
// A broker that died without removing its file is found stale by its pid. Several brokers may
// share a home (two rule files or ports, one token store); each has its own record.
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { ensurePrivateDir, writeFileAtomic } from "./fs.js";

export interface BrokerRecord {
  readonly pid: number;
  readonly url: string;
  readonly port: number;
  readonly host: string;
  readonly version: string;
  readonly ca: string;
  readonly bundle: string;
  readonly rules: string;
  readonly startedAt: string;
}

const RUN_DIR = "run";

function recordPath(home: string, port: number): string {
  return join(home, RUN_DIR, `broker-${port}.json`);
}

/** Whether a process with this pid exists (EPERM: it does, and is someone else's). */
export function processAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

export function writeBrokerRecord(home: string, record: BrokerRecord): void {
  ensurePrivateDir(join(home, RUN_DIR));
  writeFileAtomic(recordPath(home, record.port), JSON.stringify(record, null, 2) + "\n");
}

/** Removes this process's record for `port` (never another broker's). */
export function removeBrokerRecord(home: string, port: number, pid = process.pid): void {
  const path = recordPath(home, port);
  try {
    const record = JSON.parse(readFileSync(path, "utf8")) as BrokerRecord;
    if (record.pid === pid) rmSync(path, { force: true });
  } catch {
    // already gone
  }
}

/**
 * The records of brokers whose process still exists, by port. Records of dead processes are
 * removed on the way (when the home is writable). Never creates anything.
 */
export function readBrokerRecords(home: string): BrokerRecord[] {
  let names: string[];
  try {
    names = readdirSync(join(home, RUN_DIR));
  } catch {
    return [];
  }
  const out: BrokerRecord[] = [];
  for (const name of names) {
    if (!/^broker-\d+\.json$/.test(name)) continue;
    const path = join(home, RUN_DIR, name);
    let record: BrokerRecord;
    try {
      record = JSON.parse(readFileSync(path, "utf8")) as BrokerRecord;
    } catch {
      continue;
    }
    if (processAlive(record.pid)) out.push(record);
    else {
      try {
        rmSync(path, { force: true });
      } catch {
        // a home this user cannot write: the record stays, and stays ignored
      }
    }
  }
  return out.sort((a, b) => a.port - b.port);
}

/** The live record of the broker on `port`, if any. */
export function brokerRecordOnPort(home: string, port: number): BrokerRecord | undefined {
  return readBrokerRecords(home).find((r) => r.port === port);
}
