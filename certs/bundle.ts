// The trust bundle handed to child processes: the system's roots plus the keybroker CA, so that
// one SSL_CERT_FILE works both for intercepted hosts and for everything passed through. Beside
// it, the same certificates as an OpenSSL CA directory (SSL_CERT_DIR): one file per certificate,
// named by its subject hash.
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { ensurePrivateDir, writeFileAtomic } from "../core/fs.js";
import { CA_DIR, type CertificateAuthority } from "./ca.js";
import { subjectHash } from "./subject-hash.js";
import {
  pemToDer,
  type SystemRootsOptions,
  systemRootCertificates,
  uniqueCertificates,
} from "./system-roots.js";

export const BUNDLE_FILE = "bundle.pem";
const BUNDLE_DIR = "bundle.d";

/** The system's root certificates as PEM (see certs/system-roots.ts for where they come from). */
export function systemRootsPem(opts: SystemRootsOptions = {}): string {
  return `${systemRootCertificates(opts).join("\n")}\n`;
}

/** What verified TLS trusts: the system's roots, then the rule file's `upstream_ca` files. */
export function trustedRoots(upstreamCa: readonly string[]): string[] {
  return [systemRootsPem(), ...upstreamCa.map((p) => readFileSync(p, "utf8"))];
}

/** The CA directory that goes with a bundle file. */
export function bundleDirFor(bundlePath: string): string {
  return join(dirname(bundlePath), BUNDLE_DIR);
}

/**
 * Writes `${home}/ca/bundle.pem` (system roots followed by the CA) and its CA directory
 * `${home}/ca/bundle.d/`, and returns the bundle's path.
 */
export function writeTrustBundle(ca: CertificateAuthority, home: string, roots?: SystemRootsOptions): string {
  const dir = join(home, CA_DIR);
  ensurePrivateDir(dir);
  const path = join(dir, BUNDLE_FILE);
  const certs = uniqueCertificates([...systemRootCertificates(roots), ca.certPem]);
  const text = `${certs.join("\n")}\n`;
  const hashed = bundleDirFor(path);
  const unchanged = existsSync(path) && existsSync(hashed) && readFileSync(path, "utf8") === text;
  if (!unchanged) {
    writeFileAtomic(path, text, 0o644);
    writeCaDir(hashed, certs);
  }
  return path;
}

/** `<hash>.<n>` per certificate, written aside then swapped in so readers see a whole folder. */
function writeCaDir(dir: string, certs: readonly string[]): void {
  const next = `${dir}.${process.pid}.new`;
  rmSync(next, { recursive: true, force: true });
  mkdirSync(next, { mode: 0o755 });
  const used = new Map<string, number>();
  for (const pem of certs) {
    const hash = subjectHash(pemToDer(pem));
    const n = used.get(hash) ?? 0;
    used.set(hash, n + 1);
    writeFileSync(join(next, `${hash}.${n}`), `${pem}\n`, { mode: 0o644 });
  }
  const old = `${dir}.${process.pid}.old`;
  // Another process may swap its own folder in at the same moment (two commands starting a
  // broker from one home): a rename onto a folder that is there fails, so each attempt first
  // moves aside whatever is in place, and the last writer's folder stays. After ten attempts
  // lost to others, theirs stays: writers from one home write the same certificates.
  for (let attempt = 1; ; attempt++) {
    rmSync(old, { recursive: true, force: true });
    try {
      renameSync(dir, old);
    } catch (err) {
      if (errCode(err) !== "ENOENT") throw err;
    }
    try {
      renameSync(next, dir);
      break;
    } catch (err) {
      const code = errCode(err);
      if ((code !== "ENOTEMPTY" && code !== "EEXIST") || attempt >= 50) throw err;
      if (attempt >= 10 && existsSync(dir)) {
        rmSync(next, { recursive: true, force: true });
        break;
      }
    }
  }
  rmSync(old, { recursive: true, force: true });
}

function errCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException).code;
}
