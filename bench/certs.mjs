// Test PKI for the fake upstream: a throwaway CA and one server certificate valid for every
// name the benchmark dials (localhost, 127.0.0.1 and *.bench.test).
//
// One static certificate on purpose: if the upstream minted a certificate per SNI name, the
// "first request to a new host" scenario would also time the upstream's minting and blur what
// keybroker adds. Keys come from node's native RSA generator (fast); node-forge only builds and
// signs the two certificates.
import { generateKeyPairSync } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import forge from "node-forge";

/** The wildcard the new-host scenario uses; each fresh host is `<label>.bench.test`. */
export const BENCH_DOMAIN = "bench.test";

function rsaKeyPair() {
  const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const pem = privateKey.export({ type: "pkcs8", format: "pem" }).toString();
  const key = forge.pki.privateKeyFromPem(pem);
  return { pem, key, publicKey: forge.pki.setRsaPublicKey(key.n, key.e) };
}

function serial() {
  // Positive 16-byte serial (a leading 0x7f nibble keeps the DER INTEGER positive).
  return `7f${forge.util.bytesToHex(forge.random.getBytesSync(15))}`;
}

function certificate({ subject, issuer, publicKey, signingKey, extensions, days }) {
  const cert = forge.pki.createCertificate();
  cert.publicKey = publicKey;
  cert.serialNumber = serial();
  cert.validity.notBefore = new Date(Date.now() - 60 * 60 * 1000);
  cert.validity.notAfter = new Date(Date.now() + days * 24 * 60 * 60 * 1000);
  cert.setSubject(subject);
  cert.setIssuer(issuer);
  cert.setExtensions(extensions);
  cert.sign(signingKey, forge.md.sha256.create());
  return forge.pki.certificateToPem(cert);
}

/**
 * Writes `upstream-ca.pem`, `upstream.pem` and `upstream.key` into `dir` and returns their paths.
 * The CA is what the broker's `upstream_ca` and the direct client trust.
 */
export function makeUpstreamCerts(dir) {
  const caKeys = rsaKeyPair();
  const caName = [{ name: "commonName", value: "keybroker bench upstream CA" }];
  const caPem = certificate({
    subject: caName,
    issuer: caName,
    publicKey: caKeys.publicKey,
    signingKey: caKeys.key,
    days: 7,
    extensions: [
      { name: "basicConstraints", cA: true, critical: true },
      { name: "keyUsage", keyCertSign: true, cRLSign: true, critical: true },
      { name: "subjectKeyIdentifier" },
    ],
  });

  const leafKeys = rsaKeyPair();
  const leafPem = certificate({
    subject: [{ name: "commonName", value: "localhost" }],
    issuer: caName,
    publicKey: leafKeys.publicKey,
    signingKey: caKeys.key,
    days: 7,
    extensions: [
      { name: "basicConstraints", cA: false },
      { name: "keyUsage", digitalSignature: true, keyEncipherment: true, critical: true },
      { name: "extKeyUsage", serverAuth: true },
      {
        name: "subjectAltName",
        altNames: [
          { type: 2, value: "localhost" },
          { type: 2, value: `*.${BENCH_DOMAIN}` },
          { type: 7, ip: "127.0.0.1" },
        ],
      },
    ],
  });

  const out = {
    ca: path.join(dir, "upstream-ca.pem"),
    cert: path.join(dir, "upstream.pem"),
    key: path.join(dir, "upstream.key"),
  };
  fs.writeFileSync(out.ca, caPem);
  fs.writeFileSync(out.cert, leafPem);
  fs.writeFileSync(out.key, leafKeys.pem, { mode: 0o600 });
  return out;
}
