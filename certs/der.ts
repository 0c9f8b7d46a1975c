// The few DER (X.690) shapes a leaf certificate needs, written and read directly. Minting a
// leaf builds one small TBSCertificate; encoding it here takes the first mints after start from
// about 1.1 ms to 0.45 (the RSA signature is the rest), and a broker that loads an existing CA
// never loads node-forge (docs/decisions.md, decision 30).

/** Universal and context-specific tags used by certificates. */
export const Tag = {
  BOOLEAN: 0x01,
  INTEGER: 0x02,
  BIT_STRING: 0x03,
  OCTET_STRING: 0x04,
  NULL: 0x05,
  OID: 0x06,
  UTF8_STRING: 0x0c,
  UTC_TIME: 0x17,
  GENERALIZED_TIME: 0x18,
  SEQUENCE: 0x30,
  SET: 0x31,
} as const;

/** A context-specific tag `[n]`: constructed for EXPLICIT wrapping, primitive for IMPLICIT. */
export function contextTag(n: number, constructed: boolean): number {
  return (constructed ? 0xa0 : 0x80) | n;
}

function lengthBytes(length: number): Buffer {
  if (length < 0x80) return Buffer.from([length]);
  const bytes: number[] = [];
  for (let n = length; n > 0; n = Math.floor(n / 256)) bytes.unshift(n & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

/** One tag-length-value element whose value is the concatenation of `parts`. */
export function tlv(tag: number, ...parts: Uint8Array[]): Buffer {
  const value = Buffer.concat(parts);
  return Buffer.concat([Buffer.from([tag]), lengthBytes(value.length), value]);
}

export const sequence = (...parts: Uint8Array[]): Buffer => tlv(Tag.SEQUENCE, ...parts);

/** A non-negative INTEGER from its big-endian magnitude, minimally encoded. */
export function unsignedInteger(magnitude: Uint8Array): Buffer {
  let start = 0;
  while (start < magnitude.length - 1 && magnitude[start] === 0) start++;
  const bytes = Buffer.from(magnitude.subarray(start));
  return (bytes[0] ?? 0) & 0x80 ? tlv(Tag.INTEGER, Buffer.from([0]), bytes) : tlv(Tag.INTEGER, bytes);
}

export function smallInteger(n: number): Buffer {
  if (!Number.isInteger(n) || n < 0 || n > 127) throw new RangeError(`small integer out of range: ${n}`);
  return tlv(Tag.INTEGER, Buffer.from([n]));
}

export function oid(dotted: string): Buffer {
  const arcs = dotted.split(".").map(Number);
  if (arcs.length < 2 || arcs.some((a) => !Number.isSafeInteger(a) || a < 0)) {
    throw new Error(`not an object identifier: ${dotted}`);
  }
  const out: number[] = [];
  // The first two arcs share one subidentifier; every subidentifier is base 128, high bit = more.
  for (const arc of [40 * arcs[0]! + arcs[1]!, ...arcs.slice(2)]) {
    const base128 = [arc % 128];
    for (let n = Math.floor(arc / 128); n > 0; n = Math.floor(n / 128)) base128.unshift(0x80 | (n % 128));
    out.push(...base128);
  }
  return tlv(Tag.OID, Buffer.from(out));
}

export const octetString = (bytes: Uint8Array): Buffer => tlv(Tag.OCTET_STRING, bytes);
export const utf8String = (text: string): Buffer => tlv(Tag.UTF8_STRING, Buffer.from(text, "utf8"));
export const derNull = (): Buffer => Buffer.from([Tag.NULL, 0]);
export const derTrue = (): Buffer => Buffer.from([Tag.BOOLEAN, 1, 0xff]);

/** A BIT STRING of whole bytes (a key, a signature). */
export function bitString(bytes: Uint8Array): Buffer {
  return tlv(Tag.BIT_STRING, Buffer.from([0]), bytes);
}

/**
 * A named-bit BIT STRING (keyUsage) from the numbers of the bits that are set, bit 0 first.
 * DER drops trailing zero bits and counts them as unused.
 */
export function namedBits(bits: readonly number[]): Buffer {
  if (bits.length === 0) return tlv(Tag.BIT_STRING, Buffer.from([0]));
  const last = Math.max(...bits);
  const bytes = Buffer.alloc(Math.floor(last / 8) + 1);
  for (const b of bits) bytes[b >> 3] = bytes[b >> 3]! | (0x80 >> (b & 7));
  return tlv(Tag.BIT_STRING, Buffer.from([7 - (last & 7)]), bytes);
}

/** RFC 5280 §4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050; whole seconds, `Z`. */
export function time(date: Date): Buffer {
  const iso = date.toISOString(); // YYYY-MM-DDTHH:MM:SS.sssZ
  const digits = iso.slice(0, 19).replace(/[-:T]/g, "");
  const year = date.getUTCFullYear();
  if (year < 1950 || year > 9999) throw new RangeError(`certificate time out of range: ${iso}`);
  return year < 2050
    ? tlv(Tag.UTC_TIME, Buffer.from(`${digits.slice(2)}Z`, "latin1"))
    : tlv(Tag.GENERALIZED_TIME, Buffer.from(`${digits}Z`, "latin1"));
}

/** One element read from DER: its tag, and where its value lies in the buffer. */
export interface Element {
  readonly tag: number;
  /** Offset of the first byte of the element (its tag). */
  readonly start: number;
  /** Offset of the first byte of the value. */
  readonly valueStart: number;
  /** Offset just past the value (and the element). */
  readonly end: number;
}

/** Reads the element at `offset` (definite lengths only, as DER requires). */
export function readElement(der: Uint8Array, offset: number, limit = der.length): Element {
  const fail = (why: string): never => {
    throw new Error(`malformed DER at byte ${offset}: ${why}`);
  };
  if (offset + 2 > limit) fail("truncated");
  const tag = der[offset]!;
  if ((tag & 0x1f) === 0x1f) fail("multi-byte tags are not used in certificates");
  let p = offset + 1;
  let length = der[p++]!;
  if (length & 0x80) {
    const count = length & 0x7f;
    if (count === 0 || count > 4) fail("unsupported length");
    if (p + count > limit) fail("truncated length");
    length = 0;
    for (let i = 0; i < count; i++) length = length * 256 + der[p++]!;
  }
  if (p + length > limit) fail("value runs past its container");
  return { tag, start: offset, valueStart: p, end: p + length };
}

/** The elements directly inside a constructed element. */
export function children(der: Uint8Array, parent: Element): Element[] {
  const out: Element[] = [];
  for (let p = parent.valueStart; p < parent.end; ) {
    const child = readElement(der, p, parent.end);
    out.push(child);
    p = child.end;
  }
  return out;
}

export const elementBytes = (der: Uint8Array, e: Element): Buffer =>
  Buffer.from(der.buffer, der.byteOffset + e.start, e.end - e.start);
export const valueBytes = (der: Uint8Array, e: Element): Buffer =>
  Buffer.from(der.buffer, der.byteOffset + e.valueStart, e.end - e.valueStart);

/** Decodes an OBJECT IDENTIFIER's value to dotted form. */
export function oidText(value: Uint8Array): string {
  const subids: number[] = [];
  let n = 0;
  for (const byte of value) {
    n = n * 128 + (byte & 0x7f);
    if ((byte & 0x80) === 0) {
      subids.push(n);
      n = 0;
    }
  }
  if (subids.length === 0) return "";
  const first = subids[0]!;
  const head = first < 80 ? [Math.floor(first / 40), first % 40] : [2, first - 80];
  return [...head, ...subids.slice(1)].join(".");
}

/** The parts of an X.509 certificate a leaf minter needs from its issuer. */
export interface CertificateParts {
  /** The subject Name, exactly as encoded. */
  subject: Buffer;
  /** The subjectPublicKey BIT STRING's key bytes. */
  publicKeyBits: Buffer;
  /** The subjectKeyIdentifier extension's key id, when present. */
  subjectKeyId?: Buffer;
}

const SUBJECT_KEY_IDENTIFIER = "2.5.29.14";

/** Reads a DER certificate's subject Name, public key bits and subject key identifier. */
export function certificateParts(der: Uint8Array): CertificateParts {
  const cert = readElement(der, 0);
  const [tbs] = children(der, cert);
  if (cert.tag !== Tag.SEQUENCE || tbs?.tag !== Tag.SEQUENCE) throw new Error("not an X.509 certificate");
  const fields = children(der, tbs);
  // A v3 TBSCertificate starts with [0] EXPLICIT version; v1 leaves it out.
  const base = fields[0]?.tag === contextTag(0, true) ? 1 : 0;
  const subject = fields[base + 4];
  const spki = fields[base + 5];
  if (subject?.tag !== Tag.SEQUENCE || spki?.tag !== Tag.SEQUENCE)
    throw new Error("certificate has no subject");
  const keyBits = children(der, spki)[1];
  if (keyBits?.tag !== Tag.BIT_STRING) throw new Error("certificate has no public key");
  const parts: CertificateParts = {
    subject: elementBytes(der, subject),
    publicKeyBits: valueBytes(der, keyBits).subarray(1),
  };
  const extensions = fields.find((f) => f.tag === contextTag(3, true));
  if (extensions === undefined) return parts;
  const [list] = children(der, extensions);
  for (const ext of list ? children(der, list) : []) {
    const [id, ...rest] = children(der, ext);
    if (id?.tag !== Tag.OID || oidText(valueBytes(der, id)) !== SUBJECT_KEY_IDENTIFIER) continue;
    const wrapped = rest.at(-1);
    if (wrapped?.tag !== Tag.OCTET_STRING) break;
    const inner = readElement(der, wrapped.valueStart, wrapped.end);
    if (inner.tag === Tag.OCTET_STRING) parts.subjectKeyId = valueBytes(der, inner);
    break;
  }
  return parts;
}

/** PEM armour for DER bytes. */
export function toPem(label: string, der: Uint8Array): string {
  const b64 = Buffer.from(der).toString("base64");
  const lines = b64.match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join("\n")}\n-----END ${label}-----\n`;
}
