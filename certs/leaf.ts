// Per-host leaf certificates for intercepted TLS. One leaf key is made when the minter starts;
// each host only costs encoding a small TBSCertificate (certs/der.ts) and one native RSA
// signature.
import { createHash, generateKeyPairSync } from "node:crypto";
import { isIP } from "node:net";
import { createSecureContext, type SecureContext, type SecureContextOptions } from "node:tls";
import type { CertificateAuthority } from "./ca.js";
import {
  bitString,
  children,
  contextTag,
  derNull,
  derTrue,
  namedBits,
  octetString,
  oid,
  readElement,
  sequence,
  smallInteger,
  Tag,
  time,
  tlv,
  toPem,
  unsignedInteger,
  utf8String,
  valueBytes,
} from "./der.js";
import { randomSerialBytes } from "./x509.js";

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
/** GeneralName choices inside subjectAltName ([2] dNSName, [7] iPAddress, both IMPLICIT). */
const SAN_DNS = contextTag(2, false);
const SAN_IP = contextTag(7, false);

const SHA256_WITH_RSA = sequence(oid("1.2.840.113549.1.1.11"), derNull());
const COMMON_NAME = oid("2.5.4.3");
/** keyUsage bits (RFC 5280 §4.2.1.3). */
const DIGITAL_SIGNATURE = 0;
const SERVER_AUTH = "1.3.6.1.5.5.7.3.1";

/** One Extension: its id, critical when set, and its value's DER inside an OCTET STRING. */
function extension(id: string, critical: boolean, value: Buffer): Buffer {
  return sequence(oid(id), ...(critical ? [derTrue()] : []), octetString(value));
}

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
  /** The leaf key's SubjectPublicKeyInfo (DER). */
  readonly #spki: Buffer;
  /** Extensions identical on every leaf, encoded once. */
  readonly #fixedExtensions: Buffer[];
  readonly #maxCached: number;
  readonly #contextOptions: Omit<SecureContextOptions, "cert" | "key" | "pfx">;
  /** Map order is recency order: the first key is the least recently used. */
  readonly #cache = new Map<string, CachedContext>();

  constructor(ca: CertificateAuthority, options: LeafMinterOptions = {}) {
    this.#ca = ca;
    this.#maxCached = Math.max(1, options.maxCachedContexts ?? DEFAULT_MAX_CACHED_CONTEXTS);
    this.#contextOptions = options.contextOptions ?? {};
    // ECDSA P-256 (decision 173): made in well under a millisecond where an RSA key took 100 ms
    // or more of every start, and each handshake's signature costs a fraction of an RSA one.
    const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
    this.#keyPem = privateKey.export({ type: "pkcs8", format: "pem" }).toString();
    this.#spki = publicKey.export({ type: "spki", format: "der" });
    // RFC 5280 §4.2.1.2 method 1: SHA-1 of the subjectPublicKey bits (after the unused-bits
    // byte), as the CA's own identifier was made.
    const [, keyBits] = children(this.#spki, readElement(this.#spki, 0));
    const keyId = createHash("sha1").update(valueBytes(this.#spki, keyBits!).subarray(1)).digest();
    this.#fixedExtensions = [
      // cA FALSE is the default, which DER leaves out: an empty SEQUENCE.
      extension("2.5.29.19", true, sequence()),
      // An ECDSA key signs; it never enciphers a key (RFC 5480 §3).
      extension("2.5.29.15", true, namedBits([DIGITAL_SIGNATURE])),
      extension("2.5.29.37", false, sequence(oid(SERVER_AUTH))),
      extension("2.5.29.14", false, octetString(keyId)),
      // The CA's own key id ([0] keyIdentifier): chains are built and checked by it (Python
      // 3.13's strict verification rejects a leaf without it).
      extension("2.5.29.35", false, sequence(tlv(contextTag(0, false), ca.keyId))),
    ];
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
    const notAfter = new Date(Math.min(now + LEAF_VALIDITY_DAYS * DAY_MS, caExpiry)); // never past the CA
    const altName = host.ip ? tlv(SAN_IP, host.ip) : tlv(SAN_DNS, Buffer.from(host.name, "latin1"));
    const tbs = sequence(
      tlv(contextTag(0, true), smallInteger(2)), // v3
      unsignedInteger(randomSerialBytes()),
      SHA256_WITH_RSA,
      this.#ca.subjectDer, // the issuer's Name byte for byte, so the chain links
      sequence(time(new Date(now - HOUR_MS)), time(notAfter)),
      sequence(tlv(Tag.SET, sequence(COMMON_NAME, utf8String(host.name.slice(0, CN_MAX))))),
      this.#spki,
      tlv(
        contextTag(3, true),
        sequence(...this.#fixedExtensions, extension("2.5.29.17", false, sequence(altName))),
      ),
    );
    const signature = this.#ca.sign(tbs);
    const certPem = toPem("CERTIFICATE", sequence(tbs, SHA256_WITH_RSA, bitString(signature)));
    return { certPem, keyPem: this.#keyPem, notAfter };
  }
}
