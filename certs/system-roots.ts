// The operating system's trusted roots, found the way OpenSSL-based tools find them, so that a
// corporate root installed in the system store (or named by SSL_CERT_FILE or NODE_EXTRA_CA_CERTS
// in keybroker's environment) is trusted upstream and in the agent's bundle.
import { readFileSync } from "node:fs";
import * as tls from "node:tls";

/** Where distributions keep their bundle (the list Go's crypto/x509 uses), first found wins. */
export const KNOWN_CA_FILES: readonly string[] = [
  "/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Gentoo, Arch, Alpine
  "/etc/pki/tls/certs/ca-bundle.crt", // Fedora, RHEL 6
  "/etc/ssl/ca-bundle.pem", // openSUSE
  "/etc/pki/tls/cacert.pem", // OpenELEC
  "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
  "/etc/ssl/cert.pem", // Alpine, macOS, FreeBSD, OpenBSD
  "/usr/local/etc/ssl/cert.pem", // FreeBSD
  "/usr/local/share/certs/ca-root-nss.crt", // FreeBSD
];

export interface SystemRootsOptions {
  /** Whose SSL_CERT_FILE and NODE_EXTRA_CA_CERTS count (default: this process's). */
  readonly env?: NodeJS.ProcessEnv;
  /** The distribution bundles to look for (tests place their own). */
  readonly knownFiles?: readonly string[];
  /** The runtime's own view of the system store, undefined where it has none (Node 20). */
  readonly systemStore?: () => readonly string[] | undefined;
}

type WithSystemStore = { getCACertificates?: (type: "system") => string[] };

/** Node 22.15+/23.5+ read the OS store itself: the keychain on macOS, OpenSSL's paths elsewhere. */
function nodeSystemStore(): readonly string[] | undefined {
  return (tls as WithSystemStore).getCACertificates?.("system");
}

const PEM = /-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----/g;

/** The PEM certificates in a file; none when it cannot be read. */
function certificatesIn(file: string): string[] {
  try {
    return readFileSync(file, "latin1").match(PEM) ?? [];
  } catch {
    return [];
  }
}

/** The system's root certificates as PEM blocks, each once; node's bundled roots if none. */
export function systemRootCertificates(opts: SystemRootsOptions = {}): string[] {
  const env = opts.env ?? process.env;
  const store = (opts.systemStore ?? nodeSystemStore)() ?? [];
  const found: string[] = [...store];
  const read = new Set<string>();
  const add = (file: string): boolean => {
    if (read.has(file)) return true;
    read.add(file);
    const certs = certificatesIn(file);
    found.push(...certs);
    return certs.length > 0;
  };
  if (store.length === 0) (opts.knownFiles ?? KNOWN_CA_FILES).some(add);
  // What the user pointed OpenSSL and node at: added to the store, as a corporate root usually is.
  if (env.SSL_CERT_FILE) add(env.SSL_CERT_FILE);
  if (env.NODE_EXTRA_CA_CERTS) add(env.NODE_EXTRA_CA_CERTS);
  if (found.length === 0) found.push(...tls.rootCertificates);
  return uniqueCertificates(found);
}

/** A PEM certificate's DER bytes. */
export function pemToDer(pem: string): Buffer {
  return Buffer.from(pem.replace(/-----[A-Z ]+-----|\s/g, ""), "base64");
}

/** Each certificate once (by its bytes), in the order first seen, trimmed. */
export function uniqueCertificates(pems: readonly string[]): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  for (const pem of pems) {
    const body = pem.replace(/\s+/g, "");
    if (seen.has(body)) continue;
    seen.add(body);
    out.push(pem.trim());
  }
  return out;
}
