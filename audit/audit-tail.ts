// `audit tail`: the last lines of the audit log, readable or raw, and following new lines as
// they are written, across rotation (the file being read is renamed to audit.1.jsonl and a new
// audit.jsonl begins; every line of the old file is read before moving on).
import { type FSWatcher, watch } from "node:fs";
import { type FileHandle, open, readFile, stat } from "node:fs/promises";
import { ensurePrivateDir } from "../core/fs.js";
import { type AuditChain, type AuditRecord, auditDir, currentAuditFile } from "./audit-log.js";
import { listAuditFiles } from "./audit-verify.js";

/** One entry, one readable line: time, decision, client → provider, request, status. */
export function formatAuditLine(text: string): string {
  let r: Partial<AuditRecord>;
  try {
    r = JSON.parse(text) as Partial<AuditRecord>;
  } catch {
    return `(not an audit line) ${text}`;
  }
  const who =
    r.client !== undefined || r.provider !== undefined ? `${r.client ?? "-"} → ${r.provider ?? "-"}` : "-";
  const request =
    r.method !== undefined || r.host !== undefined ? `${r.method ?? "-"} ${r.host ?? ""}${r.path ?? ""}` : "";
  const parts = [r.time ?? "-", (r.decision ?? "-").padEnd(15), who];
  if (request !== "") parts.push(request);
  if (r.status !== undefined) parts.push(String(r.status));
  if (r.credential !== undefined) parts.push(`credential ${r.credential}`);
  const why = [r.code, r.reason].filter((x) => x !== undefined && x !== "").join(": ");
  if (why !== "") parts.push(`(${why})`);
  return parts.join("  ");
}

function completeLines(text: string): string[] {
  return text.split("\n").filter((l) => l !== "");
}

/** The last `n` lines across the audit files (newest last). */
export async function lastAuditLines(home: string, n: number, name: AuditChain = "audit"): Promise<string[]> {
  if (n <= 0) return [];
  const files = listAuditFiles(home, name);
  let out: string[] = [];
  for (let i = files.length - 1; i >= 0 && out.length < n; i--) {
    out = [...completeLines(await readFile(files[i]!, "utf8")), ...out];
  }
  return out.slice(-n);
}

export interface FollowOptions {
  /** Lines already in the log to show first (like `tail -n`). */
  readonly last: number;
  readonly onLine: (line: string) => void;
  /** Which chain to follow (default `audit`). */
  readonly name?: AuditChain;
  /** How often to look for changes besides file-system events, in ms (default 1000). */
  readonly pollMs?: number;
}

/**
 * How long a break in the chain is waited out before the lines in between are given up: the
 * file that continues it can appear a moment after the current one while the broker rotates
 * (a slow machine, or a follower that lists the folder mid-rename).
 */
const GAP_WAIT_MS = 2000;

const HASH = /"hash":"([0-9a-f]{64})"\}$/;
const PREV = /"prev":"([0-9a-f]{64})"/;

/** Complete lines of `fh` from `pos` on, and the position after the last one. */
async function readLines(fh: FileHandle, pos: number): Promise<{ lines: string[]; end: number }> {
  const parts: Buffer[] = [];
  let at = pos;
  for (;;) {
    const buf = Buffer.alloc(64 * 1024);
    const { bytesRead } = await fh.read(buf, 0, buf.length, at);
    if (bytesRead === 0) break;
    parts.push(buf.subarray(0, bytesRead));
    at += bytesRead;
  }
  const data = Buffer.concat(parts);
  const nl = data.lastIndexOf(0x0a);
  if (nl === -1) return { lines: [], end: pos };
  return { lines: completeLines(data.toString("utf8", 0, nl)), end: pos + nl + 1 };
}

/**
 * Follows the audit log. `start()` shows the last lines and resolves once following has begun;
 * `stop()` ends it.
 *
 * Files are renamed under the reader's feet while it rotates, so a file is never read by name
 * after start-up: each is opened once and read through its descriptor, and the next one is the
 * file whose first line links (`prev`) to the last line shown — the hash chain gives the order.
 * Lines are shown once each, in order, however many rotations happen between two reads.
 */
export class AuditFollower {
  readonly #home: string;
  readonly #path: string;
  readonly #opts: FollowOptions;
  #fh: FileHandle | undefined;
  #ino = 0;
  #pos = 0;
  /** The hash of the last line shown (or skipped at start): the next line must link to it. */
  #lastHash: string | undefined;
  #watcher: FSWatcher | undefined;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #again = false;
  #stopped = false;
  /** When the chain was first found broken (no file continues it), until it is mended. */
  #gapSince: number | undefined;

  constructor(home: string, opts: FollowOptions) {
    this.#home = home;
    this.#path = currentAuditFile(home, opts.name);
    this.#opts = opts;
  }

  async start(): Promise<void> {
    // The folder the broker will create anyway (0700), so that it can be watched now.
    ensurePrivateDir(auditDir(this.#home));
    let shown: string[] = [];
    const fh = await open(this.#path, "r").catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") return undefined;
      throw err;
    });
    if (fh !== undefined) {
      this.#fh = fh;
      this.#ino = (await fh.stat()).ino;
      const { lines, end } = await readLines(fh, 0);
      this.#pos = end;
      shown = lines;
    }
    // History from the rotated files (by name: nothing else is reading them at this point).
    const older = listAuditFiles(this.#home, this.#opts.name).filter((f) => f !== this.#path);
    for (let i = older.length - 1; i >= 0 && (shown.length < this.#opts.last || shown.length === 0); i--) {
      shown = [...completeLines(await readFile(older[i]!, "utf8")), ...shown];
    }
    const last = shown[shown.length - 1];
    this.#lastHash = last === undefined ? undefined : HASH.exec(last)?.[1];
    for (const line of this.#opts.last > 0 ? shown.slice(-this.#opts.last) : []) this.#opts.onLine(line);
    try {
      this.#watcher = watch(auditDir(this.#home), () => this.#kick());
      this.#watcher.on("error", () => {});
    } catch {
      // Not watchable (no permission, no inotify): the timer alone finds new lines.
    }
    this.#timer = setInterval(() => this.#kick(), this.#opts.pollMs ?? 1000);
    this.#kick();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#watcher?.close();
    if (this.#timer !== undefined) clearInterval(this.#timer);
    await this.#running;
    await this.#fh?.close();
    this.#fh = undefined;
  }

  /** Reads whatever is new; coalesces events that arrive while a read is running. */
  #kick(): void {
    if (this.#stopped) return;
    if (this.#running !== undefined) {
      this.#again = true;
      return;
    }
    this.#running = (async () => {
      do {
        this.#again = false;
        await this.#poll();
      } while (this.#again && !this.#stopped);
    })()
      .catch(() => {})
      .finally(() => {
        this.#running = undefined;
      });
  }

  /**
   * Shows the new complete lines of the followed file. Returns false, showing nothing, when the
   * file's first line does not link to the last line shown: it is a later file, and the ones in
   * between must come first.
   */
  async #readFollowed(): Promise<boolean> {
    const fh = this.#fh!;
    const { lines, end } = await readLines(fh, this.#pos);
    const first = lines[0];
    if (this.#pos === 0 && first !== undefined && this.#lastHash !== undefined) {
      if (PREV.exec(first)?.[1] !== this.#lastHash) return false;
    }
    this.#pos = end;
    for (const line of lines) {
      this.#lastHash = HASH.exec(line)?.[1] ?? this.#lastHash;
      this.#opts.onLine(line);
    }
    return true;
  }

  async #poll(): Promise<void> {
    if (this.#fh === undefined || !(await this.#readFollowed())) {
      await this.#catchUp();
      return;
    }
    let current: { ino: number; size: number } | undefined;
    try {
      current = await stat(this.#path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    if (current === undefined) return; // Between the rename and the new file: wait.
    if (current.ino === this.#ino) {
      if (current.size < this.#pos) {
        // Truncated in place: start over without expecting a link.
        this.#pos = 0;
        this.#lastHash = undefined;
        await this.#readFollowed();
      }
      return;
    }
    // Rotated: the followed file is finished once its last lines are read.
    await this.#readFollowed();
    await this.#closeFollowed();
    await this.#catchUp();
  }

  async #closeFollowed(): Promise<void> {
    const fh = this.#fh;
    this.#fh = undefined;
    await fh?.close();
  }

  /** Opens the file whose first line links to `#lastHash`, if any, keeping it open. */
  async #successor(): Promise<boolean> {
    if (this.#lastHash === undefined) return false;
    for (const path of listAuditFiles(this.#home, this.#opts.name)) {
      let fh: FileHandle;
      try {
        fh = await open(path, "r");
      } catch {
        continue; // Renamed or removed since the listing.
      }
      const head = Buffer.alloc(1024);
      const { bytesRead } = await fh.read(head, 0, head.length, 0);
      if (PREV.exec(head.toString("latin1", 0, bytesRead))?.[1] === this.#lastHash) {
        this.#fh = fh;
        this.#ino = (await fh.stat()).ino;
        this.#pos = 0;
        return true;
      }
      await fh.close();
    }
    return false;
  }

  /** Shows every file that follows the last line shown, up to the current one, and follows that. */
  async #catchUp(): Promise<void> {
    await this.#closeFollowed();
    while (!this.#stopped) {
      if (await this.#successor()) {
        this.#gapSince = undefined;
        await this.#readFollowed();
        const current = await stat(this.#path).catch(() => undefined);
        if (current?.ino === this.#ino) return; // The current file: keep following it.
        await this.#readFollowed();
        await this.#closeFollowed();
        continue;
      }
      // No file links on: the next line is not written yet, or a file is gone (more rotations
      // than kept files, or an edit). Follow the current file.
      let fh: FileHandle;
      try {
        fh = await open(this.#path, "r");
      } catch {
        return; // Not created yet: the next event or tick tries again.
      }
      this.#fh = fh;
      this.#ino = (await fh.stat()).ino;
      this.#pos = 0;
      if (await this.#readFollowed()) {
        this.#gapSince = undefined;
        return;
      }
      await this.#closeFollowed();
      // The current file is later than the last line shown. The file in between may still be
      // on its way: the next event or tick looks again. Once it has not come for GAP_WAIT_MS,
      // the lines in between are gone (more rotations than kept files, or an edit): go on.
      const now = Date.now();
      this.#gapSince ??= now;
      if (now - this.#gapSince < GAP_WAIT_MS) return;
      this.#gapSince = undefined;
      this.#lastHash = undefined;
    }
  }
}
