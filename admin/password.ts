// The admin page's password (`keybroker admin password`): a scrypt hash (node:crypto) in
// `$home/admin.password`, 0600. Read at each login attempt, so a new password works at once.
import { randomBytes, scrypt, timingSafeEqual } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { ensurePrivateDir, writeFileAtomic } from "../core/fs.js";

/** scrypt cost N=2^15, r=8, p=1: 32 MiB and a few tens of ms per attempt (RFC 7914 interactive). */
const N = 1 << 15;
const R = 8;
const P = 1;
const KEY_LENGTH = 32;
/** scrypt needs 128·N·r bytes; node's default cap (32 MiB) is just too small for N=2^15, r=8. */
const MAX_MEM = 64 * 1024 * 1024;

export function passwordPath(home: string): string {
  return join(home, "admin.password");
}

function derive(password: string, salt: Buffer, n: number, r: number, p: number): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(password.normalize("NFC"), salt, KEY_LENGTH, { N: n, r, p, maxmem: MAX_MEM }, (err, key) =>
      err ? reject(err) : resolve(key),
    ),
  );
}

/** `scrypt$N$r$p$<salt b64url>$<hash b64url>`. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await derive(password, salt, N, R, P);
  return `scrypt$${N}$${R}$${P}$${salt.toString("base64url")}$${key.toString("base64url")}`;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [kind, n, r, p, salt, hash] = stored.trim().split("$");
  if (kind !== "scrypt" || salt === undefined || hash === undefined) return false;
  const expected = Buffer.from(hash, "base64url");
  const key = await derive(password, Buffer.from(salt, "base64url"), Number(n), Number(r), Number(p));
  return key.length === expected.length && timingSafeEqual(key, expected);
}

export async function setPassword(home: string, password: string): Promise<void> {
  ensurePrivateDir(home);
  writeFileAtomic(passwordPath(home), (await hashPassword(password)) + "\n");
}

/** The stored hash, or undefined when no password is set. */
export async function readPasswordHash(home: string): Promise<string | undefined> {
  try {
    const text = (await readFile(passwordPath(home), "utf8")).trim();
    return text === "" ? undefined : text;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}
