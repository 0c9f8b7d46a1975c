import { execFile } from "node:child_process";
import { createHash, generateKeyPairSync, sign, X509Certificate } from "node:crypto";
import { join } from "node:path";
import forge from "node-forge";
import { afterAll, describe, expect, it } from "vitest";
import { loadOrCreateCa } from "../../../certs/ca.js";
import {
  certificateParts,
  namedBits,
  oid,
  oidText,
  readElement,
  sequence,
  time,
  toPem,
  unsignedInteger,
  utf8String,
} from "../../../certs/der.js";
import { forgePublicKey, signCertificate } from "../../../certs/x509.js";
import { CLI } from "../../helpers/broker.js";
import { makeHome, removeHomes } from "./helpers.js";

afterAll(removeHomes);

/** forge's reading of DER bytes: an independent decoder to check the encoder against. */
const parse = (der: Buffer) => forge.asn1.fromDer(der.toString("binary"));
const hex = (b: Buffer) => b.toString("hex");

describe("DER encoding", () => {
  it("encodes lengths of 128 bytes and more in long form", () => {
    for (const size of [0, 127, 128, 255, 256, 70_000]) {
      const der = utf8String("x".repeat(size));
      const read = readElement(der, 0);
      expect(read.end).toBe(der.length);
      expect(read.end - read.valueStart).toBe(size);
      expect((parse(der).value as string).length).toBe(size);
    }
    expect(hex(utf8String("x".repeat(128)).subarray(0, 3))).toBe("0c8180");
  });

  it("keeps integers positive and minimal", () => {
    expect(hex(unsignedInteger(Buffer.from([0x7f])))).toBe("02017f");
    expect(hex(unsignedInteger(Buffer.from([0x80])))).toBe("02020080");
    expect(hex(unsignedInteger(Buffer.from([0, 0, 0x01, 0x02])))).toBe("02020102");
    expect(hex(unsignedInteger(Buffer.from([0])))).toBe("020100");
  });

  it("encodes object identifiers with multi-byte arcs", () => {
    for (const id of ["2.5.29.17", "1.2.840.113549.1.1.11", "1.3.6.1.5.5.7.3.1", "2.999.16384"]) {
      const der = oid(id);
      expect(forge.asn1.derToOid(parse(der).value as string)).toBe(id);
      expect(oidText(der.subarray(2))).toBe(id);
    }
    expect(() => oid("1")).toThrow(/object identifier/);
  });

  it("drops trailing zero bits of a named-bit string", () => {
    // keyUsage digitalSignature (0) + keyEncipherment (2): 101 then five unused bits.
    expect(hex(namedBits([0, 2]))).toBe("030205a0");
    // keyCertSign (5) + cRLSign (6): one unused bit.
    expect(hex(namedBits([5, 6]))).toBe("03020106");
    // decipherOnly (8) alone: a second byte, seven unused bits.
    expect(hex(namedBits([8]))).toBe("0303070080");
  });

  it("writes UTCTime through 2049 and GeneralizedTime from 2050", () => {
    expect(time(new Date("2049-12-31T23:59:59.900Z")).toString("latin1").slice(2)).toBe("491231235959Z");
    expect(time(new Date("2050-01-01T00:00:00Z")).toString("latin1").slice(2)).toBe("20500101000000Z");
    expect(time(new Date("2050-01-01T00:00:00Z"))[0]).toBe(0x18);
  });

  it("refuses truncated and overlong input instead of reading past it", () => {
    const der = sequence(utf8String("abc"));
    expect(() => readElement(der.subarray(0, der.length - 1), 0)).toThrow(/malformed DER/);
    expect(() => readElement(Buffer.from([0x30]), 0)).toThrow(/truncated/);
    expect(() => readElement(Buffer.from([0x30, 0x85, 1, 1, 1, 1, 1]), 0)).toThrow(/unsupported length/);
  });

  it("wraps DER as PEM that node reads back", () => {
    const home = makeHome();
    const ca = loadOrCreateCa(home);
    const der = new X509Certificate(ca.certPem).raw;
    expect(new X509Certificate(toPem("CERTIFICATE", der)).fingerprint256).toBe(ca.fingerprint256);
  });
});

describe("certificateParts", () => {
  it("reads the CA's subject, key bits and key identifier as forge does", () => {
    const ca = loadOrCreateCa(makeHome());
    const der = new X509Certificate(ca.certPem).raw;
    const parts = certificateParts(der);
    const cert = forge.pki.certificateFromPem(ca.certPem);
    const ski = cert.getExtension("subjectKeyIdentifier") as { subjectKeyIdentifier: string };
    expect(hex(parts.subjectKeyId!)).toBe(ski.subjectKeyIdentifier);
    expect(hex(parts.subject)).toBe(
      Buffer.from(
        forge.asn1.toDer(forge.pki.distinguishedNameToAsn1(cert.subject)).getBytes(),
        "binary",
      ).toString("hex"),
    );
    expect(hex(ca.keyId)).toBe(ski.subjectKeyIdentifier);
  });

  it("derives the key identifier from the key when the certificate has none", () => {
    const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    const cert = forge.pki.createCertificate();
    cert.publicKey = forgePublicKey(publicKey);
    cert.serialNumber = "01";
    cert.validity.notBefore = new Date(Date.now() - 60_000);
    cert.validity.notAfter = new Date(Date.now() + 86_400_000);
    cert.setSubject([{ shortName: "CN", value: "no ski" }]);
    cert.setIssuer([{ shortName: "CN", value: "no ski" }]);
    cert.setExtensions([{ name: "basicConstraints", cA: true, critical: true }]);
    const pem = signCertificate(cert, (tbs) => sign("sha256", tbs, privateKey));
    const parts = certificateParts(new X509Certificate(pem).raw);
    expect(parts.subjectKeyId).toBeUndefined();
    expect(hex(createHash("sha1").update(parts.publicKeyBits).digest())).toBe(
      cert.generateSubjectKeyIdentifier().toHex(),
    );
  });

  it("refuses bytes that are not a certificate", () => {
    expect(() => certificateParts(sequence(utf8String("x")))).toThrow(/X\.509/);
  });
});

describe("the broker's memory", () => {
  it("loads an existing CA and mints leaves without loading node-forge", async () => {
    const home = makeHome();
    loadOrCreateCa(home); // made here, so the child only loads it
    const dist = join(CLI, "..", "..", "certs");
    const script = `
      const { createRequire } = await import("node:module");
      const { loadOrCreateCa } = await import(${JSON.stringify(join(dist, "ca.js"))});
      const { LeafMinter } = await import(${JSON.stringify(join(dist, "leaf.js"))});
      const minter = new LeafMinter(loadOrCreateCa(${JSON.stringify(home)}));
      minter.secureContext("api.example.com");
      minter.mint("10.1.2.3");
      const cache = createRequire(import.meta.url).cache;
      console.log(JSON.stringify(Object.keys(cache).filter((k) => k.includes("node-forge")).length));
    `;
    const out = await new Promise<string>((resolve, reject) => {
      execFile(process.execPath, ["--input-type=module", "-e", script], (err, stdout, stderr) =>
        err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout),
      );
    });
    expect(JSON.parse(out)).toBe(0);
  });
});
