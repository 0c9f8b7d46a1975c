// Shared X.509 building blocks for the CA and the leaf minter: forge builds the structure,
// native crypto signs it (forge's pure-JS RSA would cost tens of milliseconds per signature).
import { type KeyObject, randomBytes } from "node:crypto";
import forge from "node-forge";

/** Signs the DER bytes of a TBSCertificate and returns the raw signature. */
export type TbsSigner = (tbsDer: Buffer) => Buffer;

const SHA256_WITH_RSA: string = forge.pki.oids.sha256WithRSAEncryption!;

// `getTBSCertificate` exists in node-forge but is missing from @types/node-forge.
const pkiWithTbs = forge.pki as typeof forge.pki & {
  getTBSCertificate(cert: forge.pki.Certificate): forge.asn1.Asn1;
};

/** Index of the issuer Name inside a v3 TBSCertificate: version, serial, signature, issuer. */
const TBS_ISSUER_INDEX = 3;

/** A random positive serial number of 16 bytes, as hex, encoded minimally in DER. */
export function randomSerialHex(): string {
  const bytes = randomBytes(16);
  // Top bit clear keeps the INTEGER positive; a nonzero first byte keeps the encoding minimal.
  bytes[0] = (bytes[0]! & 0x7f) | 0x01;
  return bytes.toString("hex");
}

/** Distinguished-name attributes encoded as UTF8String (RFC 5280), not forge's PrintableString default. */
export function utf8Name(attrs: Array<{ shortName: string; value: string }>): forge.pki.CertificateField[] {
  return attrs.map((a) => ({
    shortName: a.shortName,
    value: a.value,
    // @types/node-forge types this as asn1.Class, but forge reads it as the value's universal tag.
    valueTagClass: forge.asn1.Type.UTF8 as unknown as forge.asn1.Class,
  }));
}

/** Converts a native public key into forge's representation (RSA only). */
export function forgePublicKey(key: KeyObject): forge.pki.rsa.PublicKey {
  const pem = key.export({ type: "spki", format: "pem" }).toString();
  return forge.pki.publicKeyFromPem(pem) as forge.pki.rsa.PublicKey;
}

/** Binary string (forge's byte representation) to Buffer and back. */
export function bytesToBuffer(bytes: string): Buffer {
  return Buffer.from(bytes, "binary");
}
export function bufferToBytes(buf: Uint8Array): string {
  return Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength).toString("binary");
}

/** Parses DER bytes into forge's ASN.1 tree. */
export function derToAsn1(der: Uint8Array): forge.asn1.Asn1 {
  return forge.asn1.fromDer(bufferToBytes(der));
}

/**
 * Signs `cert` with sha256WithRSAEncryption using `signer` (native crypto) and returns its PEM.
 * `issuerName`, when given, is the issuer's Name exactly as encoded in the issuer certificate;
 * it replaces forge's re-encoding of `cert.issuer`, so the chain links byte for byte.
 */
export function signCertificate(
  cert: forge.pki.Certificate,
  signer: TbsSigner,
  issuerName?: forge.asn1.Asn1,
): string {
  cert.signatureOid = SHA256_WITH_RSA;
  cert.siginfo.algorithmOid = SHA256_WITH_RSA;
  const tbs = pkiWithTbs.getTBSCertificate(cert);
  if (issuerName) {
    const fields = tbs.value as forge.asn1.Asn1[];
    fields[TBS_ISSUER_INDEX] = issuerName;
  }
  // certificateToPem reuses the cached TBSCertificate, so the signed bytes are the ones written.
  cert.tbsCertificate = tbs;
  const tbsDer = bytesToBuffer(forge.asn1.toDer(tbs).getBytes());
  cert.signature = bufferToBytes(signer(tbsDer));
  return forge.pki.certificateToPem(cert);
}

/** The subject Name of a DER certificate as an ASN.1 tree, taken verbatim from the certificate. */
export function subjectNameOf(certDer: Uint8Array): forge.asn1.Asn1 {
  const certificate = derToAsn1(certDer);
  const tbs = (certificate.value as forge.asn1.Asn1[])[0];
  const fields = tbs?.value as forge.asn1.Asn1[] | undefined;
  // A v3 TBSCertificate starts with the explicit [0] version; a v1 one does not.
  const first = fields?.[0];
  const offset = first && first.tagClass === forge.asn1.Class.CONTEXT_SPECIFIC ? 1 : 0;
  const subject = fields?.[4 + offset];
  if (!subject) throw new Error("certificate has no subject name");
  return subject;
}
