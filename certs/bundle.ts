// The trust bundle handed to child processes: the system's roots plus the keybroker CA, so that
// one SSL_CERT_FILE works both for intercepted hosts and for everything passed through.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { rootCertificates } from "node:tls";
import { ensurePrivateDir, writeFileAtomic } from "../core/fs.js";
import { CA_DIR, type CertificateAuthority } from "./ca.js";

export const SYSTEM_CA_FILE = "/etc/ssl/certs/ca-certificates.crt";
export const BUNDLE_FILE = "bundle.pem";

/** The system's root certificates as PEM: the distribution's bundle file, else node's built-in roots. */
export function systemRootsPem(file: string = SYSTEM_CA_FILE): string {
  if (existsSync(file)) return withTrailingNewline(readFileSync(file, "utf8"));
  return withTrailingNewline(rootCertificates.join("\n"));
}

/** Writes `${home}/ca/bundle.pem` (system roots followed by the CA) and returns its path. */
export function writeTrustBundle(ca: CertificateAuthority, home: string, systemFile?: string): string {
  const dir = join(home, CA_DIR);
  ensurePrivateDir(dir);
  const path = join(dir, BUNDLE_FILE);
  writeFileAtomic(path, systemRootsPem(systemFile) + withTrailingNewline(ca.certPem), 0o644);
  return path;
}

function withTrailingNewline(text: string): string {
  return text.endsWith("\n") ? text : `${text}\n`;
}
