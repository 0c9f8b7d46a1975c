// Per-host leaf certificates for intercepted TLS. One leaf key is made when the minter starts;
// each host only costs building a certificate and one native RSA signature.
import { generateKeyPairSync } from "node:crypto";
import { isIP } from "node:net";
import { createSecureContext, type SecureContext, type SecureContextOptions } from "node:tls";
import forge from "node-forge";
import type { CertificateAuthority } from "./ca.js";
import { bufferToBytes, forgePublicKey, randomSerialHex, signCertificate, utf8Name } from "./x509.js";

const HOUR_MS = 60 * 60 * 1000;
const DAY_MS = 24 * HOUR_MS;
export const LEAF_VALIDITY_DAYS = 30;
/** A cached context is replaced this long before its certificate expires. */
const REFRESH_BEFORE_EXPIRY_MS = DAY_MS;
export const DEFAULT_MAX_CACHED_CONTEXTS = 2000;
/** ub-common-name: a longer host keeps its full name in the subjectAltName only. */
const CN_MAX = 64;
/** Letters, digits, hyphen and underscore labels (underscores occur in real host names). */
const DNS_NAME = /^[a-z0-9_-]{1,63}(?:\.[a-z0-9_-]{1,63})*$/;
const MAX_DNS_NAME = 253;
/** GeneralName tags inside subjectAltName. */
const SAN_DNS = 2;
const SAN_IP = 7;

export interface MintedLeaf {
  certPem: string;
  /** The minter's shared leaf key (PKCS#8 PEM). */
  keyPem: string;
  notAfter: Date;
}

export interface LeafMinterOptions {
  /** How many per-host TLS contexts to keep; the least recently used go first. */
  maxCachedContexts?: number;
  /** Extra options for every secure context (protocol versions, ciphers...); cert and key are the minter's. */
  contextOptions?: Omit<SecureContextOptions, "cert" | "key" | "pfx">;
}

/** A host as a certificate names it: a lower-case DNS name, or an IP literal with its bytes. */
export interface LeafHost {
  name: string;
  ip: Buffer | null;
}

interface CachedContext {
  context: SecureContext;
  refreshAt: number;
}

/**
 * Normalises `host` (case, IPv6 brackets and zone, a trailing dot) and rejects anything that is
 * neither an IP literal nor a plausible DNS name.
 */
export function parseLeafHost(host: string): LeafHost {
  let name = host.trim().toLowerCase();
  if (name.startsWith("[") && name.endsWith("]")) name = name.slice(1, -1);
  const version = isIP(name);
  if (version === 4) return { name, ip: ipv4Bytes(name) };
  if (version === 6) {
    const bare = name.split("%")[0]!;
    return { name: bare, ip: ipv6Bytes(bare) };
  }
  if (name.endsWith(".")) name = name.slice(0, -1);
  if (name.length > MAX_DNS_NAME || !DNS_NAME.test(name)) {
    throw new Error(`cannot issue a certificate for host ${JSON.stringify(host.slice(0, 300))}`);
  }
  return { name, ip: null };
}

function ipv4Bytes(addr: string): Buffer {
  return Buffer.from(addr.split(".").map((part) => Number.parseInt(part, 10)));
}

/** Bytes of an IPv6 address already validated by `net.isIP` (handles `::` and a dotted IPv4 tail). */
function ipv6Bytes(addr: string): Buffer {
  let text = addr;
  const lastColon = text.lastIndexOf(":");
  const last = text.slice(lastColon + 1);
  if (last.includes(".")) {
    const v4 = ipv4Bytes(last);
    const hi = ((v4[0]! << 8) | v4[1]!).toString(16);
    const lo = ((v4[2]! << 8) | v4[3]!).toString(16);
    text = `${text.slice(0, lastColon + 1)}${hi}:${lo}`;
  }
  const gap = text.indexOf("::");
  const split = (part: string): string[] => (part === "" ? [] : part.split(":"));
  let groups: string[];
  if (gap === -1) {
    groups = split(text);
  } else {
    const head = split(text.slice(0, gap));
    const tail = split(text.slice(gap + 2));
    groups = [...head, ...Array<string>(8 - head.length - tail.length).fill("0"), ...tail];
  }
  if (groups.length !== 8) throw new Error(`not an IPv6 address: ${addr}`);
  const out = Buffer.alloc(16);
  groups.forEach((group, i) => {
    out.writeUInt16BE(Number.parseInt(group, 16), i * 2);
  });
  return out;
}

/** Certificates carry whole seconds; rounding first makes `notAfter` match the certificate exactly. */
function wholeSeconds(ms: number): number {
  return Math.floor(ms / 1000) * 1000;
}

/** Mints and caches leaf certificates signed by the CA. */
export class LeafMinter {
  readonly #ca: CertificateAuthority;
  readonly #keyPem: string;
  readonly #publicKey: forge.pki.rsa.PublicKey;
  readonly #issuer: forge.asn1.Asn1;
  /** Extensions identical on every leaf, encoded once. */
  readonly #fixedExtensions: object[];
  readonly #maxCached: number;
  readonly #contextOptions: Omit<SecureContextOptions, "cert" | "key" | "pfx">;
  /** Map order is recency order: the first key is the least recently used. */
  readonly #cache = new Map<string, CachedContext>();

  constructor(ca: CertificateAuthority, options: LeafMinterOptions = {}) {
    this.#ca = ca;
    this.#maxCached = Math.max(1, options.maxCachedContexts ?? DEFAULT_MAX_CACHED_CONTEXTS);
    this.#contextOptions = options.contextOptions ?? {};
    const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    this.#keyPem = privateKey.export({ type: "pkcs8", format: "pem" }).toString();
    this.#publicKey = forgePublicKey(publicKey);
    this.#issuer = ca.subjectAsn1();

    const template = forge.pki.createCertificate();
    template.publicKey = this.#publicKey;
    template.setExtensions([
      { name: "basicConstraints", cA: false, critical: true },
      { name: "keyUsage", digitalSignature: true, keyEncipherment: true, critical: true },
      { name: "extKeyUsage", serverAuth: true },
      { name: "subjectKeyIdentifier" },
      // The CA's own key id, given explicitly: `keyIdentifier: true` would hash the leaf's key.
      { name: "authorityKeyIdentifier", keyIdentifier: bufferToBytes(ca.keyId) },
    ]);
    this.#fixedExtensions = template.extensions;
  }

  /** Number of per-host contexts currently cached. */
  get cachedContexts(): number {
    return this.#cache.size;
  }

  /** Issues a fresh leaf certificate for `host` (a DNS name or an IP literal). */
  mint(host: string): MintedLeaf {
    return this.#mint(parseLeafHost(host), wholeSeconds(Date.now()));
  }

  /**
   * A TLS server context presenting a leaf for `host`, cached per host until one day before
   * the leaf expires.
   */
  secureContext(host: string): SecureContext {
    const parsed = parseLeafHost(host);
    const now = wholeSeconds(Date.now());
    const hit = this.#cache.get(parsed.name);
    if (hit && now < hit.refreshAt) {
      this.#cache.delete(parsed.name);
      this.#cache.set(parsed.name, hit);
      return hit.context;
    }
    const leaf = this.#mint(parsed, now);
    const context = createSecureContext({ ...this.#contextOptions, cert: leaf.certPem, key: this.#keyPem });
    this.#cache.delete(parsed.name);
    this.#cache.set(parsed.name, { context, refreshAt: leaf.notAfter.getTime() - REFRESH_BEFORE_EXPIRY_MS });
    while (this.#cache.size > this.#maxCached) {
      const oldest = this.#cache.keys().next();
      if (oldest.done) break;
      this.#cache.delete(oldest.value);
    }
    return context;
  }

  /** Forgets every cached context (for example after the CA changed on disk). */
  clearCache(): void {
    this.#cache.clear();
  }

  #mint(host: LeafHost, now: number): MintedLeaf {
    const caExpiry = this.#ca.notAfter.getTime();
    if (now >= caExpiry) {
      throw new Error(`the keybroker CA ${this.#ca.certPath} expired on ${this.#ca.notAfter.toISOString()}`);
    }
    const cert = forge.pki.createCertificate();
    cert.publicKey = this.#publicKey;
    cert.serialNumber = randomSerialHex();
    cert.validity.notBefore = new Date(now - HOUR_MS);
    // A leaf never outlives its CA.
    cert.validity.notAfter = new Date(Math.min(now + LEAF_VALIDITY_DAYS * DAY_MS, caExpiry));
    cert.setSubject(utf8Name([{ shortName: "CN", value: host.name.slice(0, CN_MAX) }]));
    const altName = host.ip
      ? { type: SAN_IP, value: bufferToBytes(host.ip) }
      : { type: SAN_DNS, value: host.name };
    cert.setExtensions([...this.#fixedExtensions, { name: "subjectAltName", altNames: [altName] }]);
    const certPem = signCertificate(cert, (tbsDer) => this.#ca.sign(tbsDer), this.#issuer);
    return { certPem, keyPem: this.#keyPem, notAfter: cert.validity.notAfter };
  }
}
