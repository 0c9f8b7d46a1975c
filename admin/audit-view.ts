// What the admin page shows of the audit log: the newest lines of the current file (its last
// 256 KiB, read when the page asks, never per request) and each chain's verification state,
// checked at most every 30 s.
import { open } from "node:fs/promises";
import type { AuditChain, AuditRecord } from "../audit/audit-log.js";
import { currentAuditFile } from "../audit/audit-log.js";
import { type AuditVerifyResult, verifyAudit } from "../audit/audit-verify.js";

const TAIL_BYTES = 256 * 1024;
const VERIFY_EVERY_MS = 30_000;

export interface AuditFilter {
  readonly provider?: string | undefined;
  readonly client?: string | undefined;
  readonly decision?: string | undefined;
}

/** The newest `max` lines matching `filter`, newest first. */
export async function recentAudit(home: string, filter: AuditFilter, max = 100): Promise<AuditRecord[]> {
  let text: string;
  try {
    const fh = await open(currentAuditFile(home), "r");
    try {
      const { size } = await fh.stat();
      const start = Math.max(0, size - TAIL_BYTES);
      const buf = Buffer.alloc(size - start);
      await fh.read(buf, 0, buf.length, start);
      text = buf.toString("utf8");
      // A cut first line is not a line.
      if (start > 0) text = text.slice(text.indexOf("\n") + 1);
    } finally {
      await fh.close();
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
  const out: AuditRecord[] = [];
  const lines = text.split("\n");
  for (let i = lines.length - 1; i >= 0 && out.length < max; i--) {
    const line = lines[i]!;
    if (line === "") continue;
    let r: AuditRecord;
    try {
      r = JSON.parse(line) as AuditRecord;
    } catch {
      continue;
    }
    if (filter.provider && r.provider !== filter.provider) continue;
    if (filter.client && r.client !== filter.client) continue;
    if (filter.decision && r.decision !== filter.decision) continue;
    out.push(r);
  }
  return out;
}

export interface ChainState {
  readonly chain: AuditChain;
  readonly result: AuditVerifyResult;
  readonly checkedAt: number;
}

/** Verifies both chains, reusing an answer younger than 30 s. */
export class ChainChecker {
  readonly #home: string;
  #last: { at: number; states: Promise<ChainState[]> } | undefined;

  constructor(home: string) {
    this.#home = home;
  }

  states(): Promise<ChainState[]> {
    const now = Date.now();
    if (this.#last === undefined || now - this.#last.at > VERIFY_EVERY_MS) {
      const check = async (chain: AuditChain): Promise<ChainState> => ({
        chain,
        result: await verifyAudit(this.#home, chain),
        checkedAt: Date.now(),
      });
      this.#last = { at: now, states: Promise.all([check("audit"), check("security")]) };
    }
    return this.#last.states;
  }
}
