// The local certificate authority: created once per home, loaded on every start, so clients
// that trusted it keep trusting the broker across restarts.
import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  sign,
  X509Certificate,
} from "node:crypto";
import { chmodSync, existsSync, readFileSync, statSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { inspect } from "node:util";
import { createFileOnce, ensurePrivateDir } from "../core/fs.js";
import { certificateParts } from "./der.js";
import { forgeLib, forgePublicKey, randomSerialHex, signCertificate, utf8Name } from "./x509.js";

export const CA_DIR = "ca";
export const CA_CERT_FILE = "ca.pem";
export const CA_KEY_FILE = "ca-key.pem";
export const CA_COMMON_NAME = "keybroker local CA";
export const CA_VALIDITY_YEARS = 10;

const HOUR_MS = 60 * 60 * 1000;
/** Longest value X.509 allows for most name attributes (ub-common-name, ub-organizational-unit-name). */
const NAME_ATTR_MAX = 64;

export interface CertificateAuthorityInit {
  certPem: string;
  privateKey: KeyObject;
  certPath: string;
  keyPath: string;
}

/** A loaded CA: its public certificate, and a signer that keeps the private key out of sight. */
export class CertificateAuthority {
  readonly certPem: string;
  readonly certPath: string;
  readonly keyPath: string;
  /** Colon-separated upper-case hex SHA-256 of the certificate's DER, as node's X509Certificate prints it. */
  readonly fingerprint256: string;
  /** The CA's subject key identifier; leaves carry it as their authority key identifier. */
  readonly keyId: Buffer;
  readonly publicKey: KeyObject;
  readonly notBefore: Date;
  readonly notAfter: Date;
  /** The CA's subject Name exactly as encoded in its certificate (DER). */
  readonly subjectDer: Buffer;
  readonly #privateKey: KeyObject;

  constructor(init: CertificateAuthorityInit) {
    const x509 = new X509Certificate(init.certPem);
    if (!x509.ca) {
      throw new Error(`${init.certPath} is not a CA certificate (basicConstraints CA:true missing)`);
    }
    if (init.privateKey.type !== "private" || !x509.checkPrivateKey(init.privateKey)) {
      throw new Error(`${init.keyPath} does not hold the private key of ${init.certPath}`);
    }
    this.certPem = init.certPem;
    this.certPath = init.certPath;
    this.keyPath = init.keyPath;
    this.fingerprint256 = x509.fingerprint256;
    this.publicKey = x509.publicKey;
    this.notBefore = new Date(x509.validFrom);
    this.notAfter = new Date(x509.validTo);
    this.#privateKey = init.privateKey;

    const parts = certificateParts(x509.raw);
    // Without the extension, RFC 5280's method 1 (what keybroker's own CA carries).
    this.keyId = parts.subjectKeyId ?? createHash("sha1").update(parts.publicKeyBits).digest();
    this.subjectDer = parts.subject;
  }

  /** Signs DER bytes (a TBSCertificate) with the CA key: RSASSA-PKCS1-v1_5 over SHA-256. */
  sign(tbsDer: Uint8Array): Buffer {
    return sign("sha256", tbsDer, this.#privateKey);
  }

  toJSON(): { certPath: string; keyPath: string; fingerprint256: string } {
    return { certPath: this.certPath, keyPath: this.keyPath, fingerprint256: this.fingerprint256 };
  }

  toString(): string {
    return `CertificateAuthority(${this.certPath}, SHA-256 ${this.fingerprint256})`;
  }

  [inspect.custom](): string {
    return `CertificateAuthority ${inspect(this.toJSON())}`;
  }
}

/**
 * Loads the CA from `${home}/ca/`, or creates it there on first use.
 * The folder is kept at 0700 and the key file at 0600 (a looser key file is tightened).
 */
export function loadOrCreateCa(home: string): CertificateAuthority {
  const dir = join(home, CA_DIR);
  const certPath = join(dir, CA_CERT_FILE);
  const keyPath = join(dir, CA_KEY_FILE);
  ensurePrivateDir(dir);

  const haveCert = existsSync(certPath);
  const haveKey = existsSync(keyPath);
  if (haveCert && !haveKey) {
    throw new Error(
      `CA certificate ${certPath} exists but its key ${keyPath} is missing; ` +
        `restore the key, or remove ${dir} to create a new CA (clients must then trust the new one)`,
    );
  }

  // Two commands started at once from a new home both make a CA (decision 202): each file is
  // created only if absent, so the first key written is the CA's key, every process reads the
  // key and certificate that are on disk, and the certificate is always made from that key.
  if (!haveKey) {
    const fresh = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey;
    createFileOnce(keyPath, fresh.export({ type: "pkcs8", format: "pem" }), 0o600);
  } else if ((statSync(keyPath).mode & 0o077) !== 0) chmodSync(keyPath, 0o600);
  const privateKey = createPrivateKey(readFileSync(keyPath));

  // Also reached when a previous run wrote the key and stopped before the certificate.
  if (!haveCert) createFileOnce(certPath, buildCaCertificate(privateKey), 0o644);
  const certPem = readFileSync(certPath, "utf8");

  return new CertificateAuthority({ certPem, privateKey, certPath, keyPath });
}

/** Builds the self-signed CA certificate for `privateKey`. */
export function buildCaCertificate(privateKey: KeyObject, now: Date = new Date()): string {
  const publicKey = forgePublicKey(createPublicKey(privateKey));
  const cert = forgeLib().pki.createCertificate();
  cert.publicKey = publicKey;
  cert.serialNumber = randomSerialHex();
  cert.validity.notBefore = new Date(now.getTime() - HOUR_MS);
  const notAfter = new Date(now.getTime());
  notAfter.setUTCFullYear(notAfter.getUTCFullYear() + CA_VALIDITY_YEARS);
  cert.validity.notAfter = notAfter;

  const name = utf8Name([
    { shortName: "CN", value: CA_COMMON_NAME },
    { shortName: "O", value: "keybroker" },
    { shortName: "OU", value: machineName() },
  ]);
  cert.setSubject(name);
  cert.setIssuer(name);

  const ski = cert.generateSubjectKeyIdentifier().getBytes();
  cert.setExtensions([
    { name: "basicConstraints", cA: true, pathLenConstraint: 0, critical: true },
    { name: "keyUsage", keyCertSign: true, cRLSign: true, critical: true },
    { name: "subjectKeyIdentifier" },
    { name: "authorityKeyIdentifier", keyIdentifier: ski },
  ]);

  return signCertificate(cert, (tbsDer) => sign("sha256", tbsDer, privateKey));
}

/** The machine's host name, for the CA's OU, so several machines' CAs are told apart. */
function machineName(): string {
  const name = hostname().trim() || "unknown host";
  return name.length > NAME_ATTR_MAX ? name.slice(0, NAME_ATTR_MAX) : name;
}
