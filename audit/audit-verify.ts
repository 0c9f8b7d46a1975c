// `audit verify`: walks every audit file oldest → newest and checks each line's own hash and its
// link to the line before. The first broken line is named with its file and line number. `gap`
// lines (events a failed write lost, recorded when writing resumed) are listed apart: a gap is
// an honest loss the chain admits to, not tampering.
import { createReadStream, readdirSync } from "node:fs";
import { basename, join } from "node:path";
import { StringDecoder } from "node:string_decoder";
import { sha256 } from "./audit-line.js";
import { AUDIT_DECISIONS, type AuditChain, type AuditRecord, auditDir, GENESIS } from "./audit-log.js";

/** The audit files that exist, oldest first: audit.<n>.jsonl … audit.1.jsonl, audit.jsonl. */
export function listAuditFiles(home: string, name: AuditChain = "audit"): string[] {
  const dir = auditDir(home);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
  const rotated = names
    .map((file) => ({ name: file, n: new RegExp(`^${name}\\.([1-9][0-9]*)\\.jsonl$`).exec(file)?.[1] }))
    .filter((f): f is { name: string; n: string } => f.n !== undefined)
    .sort((a, b) => Number(b.n) - Number(a.n))
    .map((f) => join(dir, f.name));
  return names.includes(`${name}.jsonl`) ? [...rotated, join(dir, `${name}.jsonl`)] : rotated;
}

export interface AuditProblem {
  /** The file's path. */
  readonly file: string;
  /** 1-based line number in that file. */
  readonly line: number;
  readonly problem: string;
}

/** A `gap` line: events lost to a failed write, how many and between which times. */
export interface AuditGapFound {
  readonly file: string;
  readonly line: number;
  readonly lost: number;
  readonly first: string | undefined;
  readonly last: string | undefined;
  readonly reason: string | undefined;
}

export interface AuditVerifyOk {
  readonly ok: true;
  readonly gaps: readonly AuditGapFound[];
  readonly files: readonly string[];
  readonly lines: number;
  /**
   * False when the oldest kept line links to a line no longer on disk: rotation removed the
   * files before it (or the oldest lines were cut off, which the chain cannot tell apart).
   */
  readonly fromGenesis: boolean;
}

export interface AuditVerifyFailure extends AuditProblem {
  readonly ok: false;
  readonly files: readonly string[];
  /** Lines verified before the broken one. */
  readonly lines: number;
}

export type AuditVerifyResult = AuditVerifyOk | AuditVerifyFailure;

/**
 * `{…,"prev":"<hex>"` then `,"hash":"<hex>"}`: the hash covers the first part closed with `}`.
 * `s`: JSON leaves U+2028 and U+2029 unescaped in strings, and `.` would stop at them.
 */
const LINE = /^(\{.*,"prev":"[0-9a-f]{64}"),"hash":"([0-9a-f]{64})"\}$/s;

/** The record of one line, or why it is not a valid audit line. */
export function parseAuditLine(text: string): { record: AuditRecord } | { problem: string } {
  if (text === "") return { problem: "empty line" };
  const m = LINE.exec(text);
  if (m === null) return { problem: "not an audit line (no prev and hash at its end)" };
  let record: AuditRecord;
  try {
    record = JSON.parse(text) as AuditRecord;
  } catch {
    return { problem: "not valid JSON" };
  }
  if (typeof record !== "object" || record === null || !AUDIT_DECISIONS.includes(record.decision)) {
    return { problem: "not an audit line (unknown decision)" };
  }
  if (sha256(m[1]! + "}") !== m[2]) {
    return { problem: "line was changed: its content does not match its hash" };
  }
  return { record };
}

/**
 * A file's lines, ended by `\n` alone, as the log writes them. Not node's readline: it also ends
 * a line at a lone `\r`, and from Node 24 at U+2028 and U+2029, which JSON leaves unescaped in
 * a string, so a sound line holding one read as two broken ones.
 */
async function* fileLines(file: string): AsyncGenerator<string> {
  const decoder = new StringDecoder("utf8");
  let rest = "";
  for await (const chunk of createReadStream(file)) {
    rest += decoder.write(chunk as Buffer);
    let from = 0;
    let nl = rest.indexOf("\n");
    while (nl !== -1) {
      yield rest.slice(from, nl);
      from = nl + 1;
      nl = rest.indexOf("\n", from);
    }
    rest = rest.slice(from);
  }
  rest += decoder.end();
  if (rest !== "") yield rest;
}

/**
 * Checks the whole chain. The first line of the oldest file may link to a line that rotation
 * already removed; every other `prev` must equal the `hash` of the line before, across files.
 */
export async function verifyAudit(home: string, name: AuditChain = "audit"): Promise<AuditVerifyResult> {
  const files = listAuditFiles(home, name);
  const gaps: AuditGapFound[] = [];
  let prevHash: string | undefined;
  let prevWhere = "";
  let count = 0;
  let fromGenesis = true;
  for (const file of files) {
    let n = 0;
    for await (const text of fileLines(file)) {
      n++;
      const parsed = parseAuditLine(text);
      const fail = (problem: string): AuditVerifyResult => ({
        ok: false,
        files,
        lines: count,
        file,
        line: n,
        problem,
      });
      if ("problem" in parsed) return fail(parsed.problem);
      const { record } = parsed;
      if (prevHash === undefined) {
        fromGenesis = record.prev === GENESIS;
      } else if (record.prev !== prevHash) {
        return fail(
          `chain broken: prev does not match the hash of the line before (${prevWhere}); ` +
            "a line was removed, inserted or reordered here",
        );
      }
      if (record.decision === "gap") {
        gaps.push({
          file,
          line: n,
          lost: record.lost ?? 0,
          first: record.first,
          last: record.last,
          reason: record.reason,
        });
      }
      prevHash = record.hash;
      prevWhere = `${basename(file)} line ${n}`;
      count++;
    }
  }
  return { ok: true, files, lines: count, fromGenesis, gaps };
}
