// X.509 building blocks for making the CA: forge builds the structure, native crypto signs it
// (forge's pure-JS RSA would cost tens of milliseconds per signature). forge is loaded on first
// use: a CA is made once per home, and a broker that loads an existing one never needs it.
import { type KeyObject, randomBytes } from "node:crypto";
import { createRequire } from "node:module";
import type Forge from "node-forge";

let loaded: typeof Forge | undefined;
/** node-forge, loaded on first call. */
export function forgeLib(): typeof Forge {
  loaded ??= createRequire(import.meta.url)("node-forge") as typeof Forge;
  return loaded;
}

/** Signs the DER bytes of a TBSCertificate and returns the raw signature. */
export type TbsSigner = (tbsDer: Buffer) => Buffer;

// `getTBSCertificate` exists in node-forge but is missing from @types/node-forge.
type PkiWithTbs = typeof Forge.pki & {
  getTBSCertificate(cert: Forge.pki.Certificate): Forge.asn1.Asn1;
};

/** A random positive serial number of 16 bytes, encoded minimally in DER. */
export function randomSerialBytes(): Buffer {
  const bytes = randomBytes(16);
  // Top bit clear keeps the INTEGER positive; a nonzero first byte keeps the encoding minimal.
  bytes[0] = (bytes[0]! & 0x7f) | 0x01;
  return bytes;
}

export function randomSerialHex(): string {
  return randomSerialBytes().toString("hex");
}

/** Distinguished-name attributes encoded as UTF8String (RFC 5280), not forge's PrintableString default. */
export function utf8Name(attrs: Array<{ shortName: string; value: string }>): Forge.pki.CertificateField[] {
  const forge = forgeLib();
  return attrs.map((a) => ({
    shortName: a.shortName,
    value: a.value,
    // @types/node-forge types this as asn1.Class, but forge reads it as the value's universal tag.
    valueTagClass: forge.asn1.Type.UTF8 as unknown as Forge.asn1.Class,
  }));
}

/** Converts a native public key into forge's representation (RSA only). */
export function forgePublicKey(key: KeyObject): Forge.pki.rsa.PublicKey {
  const pem = key.export({ type: "spki", format: "pem" }).toString();
  return forgeLib().pki.publicKeyFromPem(pem) as Forge.pki.rsa.PublicKey;
}

/** Signs `cert` with sha256WithRSAEncryption using `signer` (native crypto) and returns its PEM. */
export function signCertificate(cert: Forge.pki.Certificate, signer: TbsSigner): string {
  const forge = forgeLib();
  const sha256WithRsa = forge.pki.oids.sha256WithRSAEncryption!;
  cert.signatureOid = sha256WithRsa;
  cert.siginfo.algorithmOid = sha256WithRsa;
  const tbs = (forge.pki as PkiWithTbs).getTBSCertificate(cert);
  // certificateToPem reuses the cached TBSCertificate, so the signed bytes are the ones written.
  cert.tbsCertificate = tbs;
  const tbsDer = Buffer.from(forge.asn1.toDer(tbs).getBytes(), "binary");
  cert.signature = signer(tbsDer).toString("binary");
  return forge.pki.certificateToPem(cert);
}
