// File helpers for the broker's home: private folders, atomic private writes.
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  closeSync,
  fsyncSync,
  linkSync,
  mkdirSync,
  openSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { open, rename, unlink } from "node:fs/promises";
import { dirname, join } from "node:path";

/** Creates `dir` (and parents) and makes sure the folder itself is mode 0700. */
export function ensurePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  if ((statSync(dir).mode & 0o777) !== 0o700) chmodSync(dir, 0o700);
}

/**
 * Writes `data` to `path` atomically: a temporary file in the same folder, fsync, rename.
 * A crash leaves either the old file or the new one, never half of either.
 */
export function writeFileAtomic(path: string, data: string | Uint8Array, mode = 0o600): void {
  const tmp = join(dirname(path), `.${randomBytes(6).toString("hex")}.tmp`);
  const fd = openSync(tmp, "wx", mode);
  try {
    writeSync(fd, typeof data === "string" ? Buffer.from(data) : data);
    fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    unlinkSync(tmp);
    throw err;
  }
  closeSync(fd);
  chmodSync(tmp, mode);
  renameSync(tmp, path);
}

/**
 * Puts `data` at `path` unless something is there already: a whole temporary file (fsync'd) is
 * linked to `path`, which fails when `path` exists, so of processes racing to create one file
 * exactly one wins and the others find its content whole. True when this call created it.
 */
export function createFileOnce(path: string, data: string | Uint8Array, mode = 0o600): boolean {
  const tmp = join(dirname(path), `.${randomBytes(6).toString("hex")}.tmp`);
  const fd = openSync(tmp, "wx", mode);
  try {
    try {
      writeSync(fd, typeof data === "string" ? Buffer.from(data) : data);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    chmodSync(tmp, mode);
    linkSync(tmp, path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  } finally {
    unlinkSync(tmp);
  }
}

/**
 * `writeFileAtomic` without blocking the event loop, and durable: the file is fsync'd before the
 * rename and the folder after it, so the new content survives a crash of the process or the
 * machine once the promise resolves (true; false when `stillWanted` said no and nothing changed).
 */
export async function writeFileDurable(
  path: string,
  data: string,
  opts: { mode?: number; stillWanted?: () => boolean } = {},
): Promise<boolean> {
  const mode = opts.mode ?? 0o600;
  const tmp = join(dirname(path), `.${randomBytes(6).toString("hex")}.tmp`);
  const fh = await open(tmp, "wx", mode);
  try {
    await fh.writeFile(data);
    await fh.chmod(mode);
    await fh.sync();
  } catch (err) {
    await fh.close();
    await unlink(tmp).catch(() => {});
    throw err;
  }
  await fh.close();
  // A newer write may have landed meanwhile (a synchronous one): do not put older data over it.
  if (opts.stillWanted?.() === false) {
    await unlink(tmp).catch(() => {});
    return false;
  }
  await rename(tmp, path);
  const dir = await open(dirname(path), "r");
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
  return true;
}
