// The broker's home folder: `--home`, `$KEYBROKER_HOME`, or `~/.keybroker`.
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { ensurePrivateDir, writeFileAtomic } from "./fs.js";

export function homePath(explicit?: string, env: NodeJS.ProcessEnv = process.env): string {
  const chosen = explicit ?? env.KEYBROKER_HOME;
  if (chosen !== undefined && chosen !== "") return resolve(chosen.replace(/^~(?=$|\/)/, homedir()));
  return join(homedir(), ".keybroker");
}

/**
 * The home's own key: 32 random bytes, created once (0600). Placeholders derive from it, so
 * they stay the same across restarts and can be computed without any real secret.
 */
export function homeKey(home: string): Buffer {
  ensurePrivateDir(home);
  const path = join(home, "home.key");
  try {
    const key = Buffer.from(readFileSync(path, "utf8").trim(), "base64");
    if (key.length === 32) return key;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  const key = randomBytes(32);
  try {
    writeFileAtomic(path, key.toString("base64") + "\n");
  } catch (err) {
    throw new Error(`cannot write ${path}: ${(err as Error).message}`, { cause: err });
  }
  // Another process may have raced us: whatever is on disk now wins.
  return Buffer.from(readFileSync(path, "utf8").trim(), "base64");
}
