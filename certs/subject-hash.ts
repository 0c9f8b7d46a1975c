// OpenSSL's subject-name hash (X509_NAME_hash, `openssl x509 -subject_hash`), the file name under
// which a CA directory (SSL_CERT_DIR, `-CApath`) must hold a certificate: `<hash>.<n>`. OpenSSL
// hashes a canonical form of the Name: every string value as a lowercased UTF8String with its
// spaces trimmed and collapsed, the RDN SETs concatenated without the outer SEQUENCE.
import { createHash } from "node:crypto";
import { certificateParts, children, elementBytes, readElement, Tag, tlv, valueBytes } from "./der.js";

const PRINTABLE_STRING = 0x13;
const T61_STRING = 0x14;
const IA5_STRING = 0x16;
const VISIBLE_STRING = 0x1a;
const UNIVERSAL_STRING = 0x1c;
const BMP_STRING = 0x1e;

/** The hash of the subject of a DER certificate, as 8 hex digits. */
export function subjectHash(certDer: Uint8Array): string {
  const name = certificateParts(certDer).subject;
  const canon: Buffer[] = [];
  for (const rdn of children(name, readElement(name, 0))) {
    const avas = children(name, rdn).map((ava) => {
      const [type, value] = children(name, ava);
      if (type === undefined || value === undefined) throw new Error("malformed name attribute");
      const text = decodeString(value.tag, valueBytes(name, value));
      const encoded = text === undefined ? elementBytes(name, value) : tlv(Tag.UTF8_STRING, canonical(text));
      return tlv(Tag.SEQUENCE, elementBytes(name, type), encoded);
    });
    canon.push(tlv(Tag.SET, ...avas.sort(Buffer.compare)));
  }
  const md = createHash("sha1").update(Buffer.concat(canon)).digest();
  return md.readUInt32LE(0).toString(16).padStart(8, "0");
}

function decodeString(tag: number, bytes: Buffer): string | undefined {
  switch (tag) {
    case Tag.UTF8_STRING:
      return bytes.toString("utf8");
    case PRINTABLE_STRING:
    case IA5_STRING:
    case VISIBLE_STRING:
    case T61_STRING: // read as Latin-1, as OpenSSL does
      return bytes.toString("latin1");
    case BMP_STRING:
      return Buffer.from(bytes).swap16().toString("utf16le");
    case UNIVERSAL_STRING: {
      let out = "";
      for (let i = 0; i + 4 <= bytes.length; i += 4) out += String.fromCodePoint(bytes.readUInt32BE(i));
      return out;
    }
    default:
      return undefined;
  }
}

/** Trimmed, inner runs of white space as one space, ASCII letters lowercased (bytes of UTF-8). */
function canonical(text: string): Buffer {
  const bytes = Buffer.from(text, "utf8");
  const space = (b: number) => b === 0x20 || (b >= 0x09 && b <= 0x0d);
  let start = 0;
  let end = bytes.length;
  while (start < end && space(bytes[start]!)) start++;
  while (end > start && space(bytes[end - 1]!)) end--;
  const out: number[] = [];
  for (let i = start; i < end; i++) {
    const b = bytes[i]!;
    if (space(b)) {
      if (!space(bytes[i - 1]!)) out.push(0x20);
    } else out.push(b >= 0x41 && b <= 0x5a ? b + 0x20 : b);
  }
  return Buffer.from(out);
}
