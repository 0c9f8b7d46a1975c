import { createPrivateKey, generateKeyPairSync, X509Certificate } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildCaCertificate, CertificateAuthority, loadOrCreateCa } from "../../../certs/ca.js";
import { LeafMinter, parseLeafHost } from "../../../certs/leaf.js";
import { makeHome, removeHomes, run } from "./helpers.js";

let home: string;
let ca: CertificateAuthority;
let minter: LeafMinter;

beforeAll(() => {
  home = makeHome();
  ca = loadOrCreateCa(home);
  minter = new LeafMinter(ca);
});
afterAll(removeHomes);

/** `openssl x509 -text` of a certificate: a parser that is not keybroker's. */
async function opensslText(certPem: string): Promise<string> {
  const path = join(home, `cert-${Math.random().toString(36).slice(2)}.pem`);
  writeFileSync(path, certPem);
  const out = await run("openssl", ["x509", "-noout", "-text", "-in", path]);
  expect(out.code, out.stderr).toBe(0);
  return out.stdout;
}

/** The line after `heading` in openssl's text (an extension's value), trimmed. */
function field(text: string, heading: string): string {
  const lines = text.split("\n").map((l) => l.trim());
  const at = lines.indexOf(heading);
  if (at < 0) throw new Error(`no "${heading}" in:\n${text}`);
  return lines[at + 1]!;
}

async function opensslVerify(certPem: string, ...extra: string[]) {
  const path = join(home, `leaf-${Math.random().toString(36).slice(2)}.pem`);
  writeFileSync(path, certPem);
  return run("openssl", ["verify", "-x509_strict", ...extra, "-CAfile", ca.certPath, path]);
}

describe("LeafMinter.mint", () => {
  it("issues a leaf that node verifies against the CA", () => {
    const leaf = minter.mint("api.example.com");
    const x509 = new X509Certificate(leaf.certPem);
    expect(x509.verify(ca.publicKey)).toBe(true);
    expect(x509.checkIssued(new X509Certificate(ca.certPem))).toBe(true);
    expect(x509.ca).toBe(false);
    expect(x509.subject).toBe("CN=api.example.com");
    expect(x509.issuer).toBe(new X509Certificate(ca.certPem).subject);
    expect(x509.subjectAltName).toBe("DNS:api.example.com");
    expect(x509.checkHost("api.example.com")).toBe("api.example.com");
    expect(x509.checkHost("other.example.com")).toBeUndefined();
    expect(x509.keyUsage).toEqual(["1.3.6.1.5.5.7.3.1"]);
    expect(x509.checkPrivateKey(createPrivateKey(leaf.keyPem))).toBe(true);
  });

  it("passes openssl verify -x509_strict as a TLS server certificate", async () => {
    const leaf = minter.mint("api.example.com");
    const out = await opensslVerify(
      leaf.certPem,
      "-purpose",
      "sslserver",
      "-verify_hostname",
      "api.example.com",
    );
    expect(out.code).toBe(0);
    expect(out.stdout).toContain("OK");
  });

  it("fails openssl verification for another host name", async () => {
    const leaf = minter.mint("api.example.com");
    const out = await opensslVerify(leaf.certPem, "-verify_hostname", "evil.example.net");
    expect(out.code).not.toBe(0);
    expect(out.stdout + out.stderr).toMatch(/hostname mismatch/i);
  });

  it("sets the extensions and validity of a server leaf", async () => {
    const before = Date.now();
    const leaf = minter.mint("api.example.com");
    const text = await opensslText(leaf.certPem);
    expect(text).toMatch(/Signature Algorithm: sha256WithRSAEncryption/);
    // The shared leaf key: ECDSA P-256 (decision 173).
    expect(text).toMatch(/Public Key Algorithm: id-ecPublicKey[\s\S]*NIST CURVE: P-256/);
    expect(field(text, "X509v3 Basic Constraints: critical")).toBe("CA:FALSE");
    // It signs, and does nothing else: no key encipherment for an ECDSA key, no CA use.
    expect(field(text, "X509v3 Key Usage: critical")).toBe("Digital Signature");
    expect(field(text, "X509v3 Extended Key Usage:")).toBe("TLS Web Server Authentication");
    expect(field(text, "X509v3 Subject Key Identifier:")).toMatch(/^([0-9A-F]{2}:){19}[0-9A-F]{2}$/);

    const cert = new X509Certificate(leaf.certPem);
    const hour = 3600 * 1000;
    const day = 24 * hour;
    const notBefore = new Date(cert.validFrom).getTime();
    const notAfter = new Date(cert.validTo).getTime();
    // validFrom/validTo are to the second.
    expect(notBefore).toBeLessThanOrEqual(before - hour + 1000);
    expect(notBefore).toBeGreaterThan(before - hour - 60_000);
    expect(notAfter - notBefore).toBe(30 * day + hour);
    expect(leaf.notAfter.getTime()).toBe(notAfter);

    expect(cert.serialNumber).toHaveLength(32);
    expect(Number.parseInt(cert.serialNumber.slice(0, 2), 16)).toBeLessThan(0x80);
    expect(minter.mint("api.example.com").certPem).not.toBe(leaf.certPem);
  });

  it("names the CA's key as the authority key identifier", async () => {
    const leafText = await opensslText(minter.mint("api.example.com").certPem);
    const caSki = field(await opensslText(ca.certPem), "X509v3 Subject Key Identifier:");
    const aki = field(leafText, "X509v3 Authority Key Identifier:").replace(/^keyid:/, "");
    expect(aki).toBe(caSki);
    expect(aki.replaceAll(":", "").toLowerCase()).toBe(ca.keyId.toString("hex"));
    expect(aki).not.toBe(field(leafText, "X509v3 Subject Key Identifier:"));
  });

  it("shares one leaf key across hosts", () => {
    const a = minter.mint("a.example.com");
    const b = minter.mint("b.example.com");
    expect(a.keyPem).toBe(b.keyPem);
    expect(a.keyPem).toContain("-----BEGIN PRIVATE KEY-----");
    expect(new X509Certificate(a.certPem).publicKey.equals(new X509Certificate(b.certPem).publicKey)).toBe(
      true,
    );
  });

  it("gives IP literals an IP address SAN", async () => {
    const v4 = new X509Certificate(minter.mint("127.0.0.1").certPem);
    expect(v4.subjectAltName).toBe("IP Address:127.0.0.1");
    expect(v4.checkIP("127.0.0.1")).toBe("127.0.0.1");
    expect(v4.subject).toBe("CN=127.0.0.1");

    const v6 = new X509Certificate(minter.mint("[2001:db8::1]").certPem);
    expect(v6.subjectAltName).toBe("IP Address:2001:DB8:0:0:0:0:0:1");
    expect(v6.checkIP("2001:db8::1")).toBe("2001:db8::1");

    const loopback6 = new X509Certificate(minter.mint("::1").certPem);
    expect(loopback6.checkIP("::1")).toBe("::1");
    expect(loopback6.checkIP("::2")).toBeUndefined();

    const mapped = new X509Certificate(minter.mint("::ffff:10.1.2.3").certPem);
    expect(mapped.subjectAltName).toBe("IP Address:0:0:0:0:0:FFFF:A01:203");

    const out = await opensslVerify(minter.mint("127.0.0.1").certPem, "-verify_ip", "127.0.0.1");
    expect(out.code).toBe(0);
    expect(out.stdout).toContain("OK");
  });

  it("truncates a long common name but keeps the full name in the SAN", async () => {
    const label = "a".repeat(60);
    const host = `${label}.${label}.example.com`;
    const x509 = new X509Certificate(minter.mint(host).certPem);
    expect(x509.subject).toBe(`CN=${host.slice(0, 64)}`);
    expect(x509.subjectAltName).toBe(`DNS:${host}`);
    expect(x509.checkHost(host)).toBe(host);
    const out = await opensslVerify(minter.mint(host).certPem, "-verify_hostname", host);
    expect(out.code).toBe(0);
  });

  it("normalises host names", () => {
    expect(parseLeafHost("API.Example.COM.")).toEqual({ name: "api.example.com", ip: null });
    expect(parseLeafHost("under_score.example")).toEqual({ name: "under_score.example", ip: null });
    expect(parseLeafHost("[::1]").ip?.toString("hex")).toBe(`${"00".repeat(15)}01`);
    expect(parseLeafHost("fe80::1%eth0")).toMatchObject({ name: "fe80::1" });
    expect(parseLeafHost("10.0.0.1").ip?.toString("hex")).toBe("0a000001");
    expect(parseLeafHost("1::").ip?.toString("hex")).toBe(`0001${"00".repeat(14)}`);
    expect(parseLeafHost("1:2:3:4:5:6:7:8").ip?.toString("hex")).toBe("00010002000300040005000600070008");
  });

  it("refuses names that are not host names", () => {
    for (const bad of [
      "",
      ".",
      "a b.example",
      "evil\n.example",
      "*.example.com",
      "a..b",
      "x/y",
      "é.example",
    ]) {
      expect(() => minter.mint(bad), JSON.stringify(bad)).toThrow(/cannot issue a certificate/);
    }
    expect(() => minter.mint(`${"a".repeat(64)}.example`)).toThrow(/cannot issue a certificate/);
  });
});

describe("LeafMinter near the CA's expiry", () => {
  /** A CA that was created long enough ago to expire `daysLeft` days from now. */
  function agingCa(daysLeft: number): CertificateAuthority {
    const privateKey = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey;
    const created = new Date();
    created.setUTCFullYear(created.getUTCFullYear() - 10);
    created.setTime(created.getTime() + daysLeft * 24 * 3600 * 1000);
    const certPem = buildCaCertificate(privateKey, created);
    return new CertificateAuthority({
      certPem,
      privateKey,
      certPath: "aging-ca.pem",
      keyPath: "aging-ca-key.pem",
    });
  }

  it("never issues a leaf that outlives the CA", () => {
    const aging = agingCa(10);
    const leaf = new LeafMinter(aging).mint("api.example.com");
    expect(leaf.notAfter.getTime()).toBe(aging.notAfter.getTime());
    expect(new X509Certificate(leaf.certPem).validTo).toBe(new X509Certificate(aging.certPem).validTo);
  });

  it("refuses to mint once the CA has expired", () => {
    expect(() => new LeafMinter(agingCa(-1)).mint("api.example.com")).toThrow(/expired/);
  });
});

describe("LeafMinter.secureContext", () => {
  it("returns the cached context for the same host", () => {
    const first = minter.secureContext("cache.example.com");
    expect(minter.secureContext("cache.example.com")).toBe(first);
    expect(minter.secureContext("CACHE.example.com.")).toBe(first);
    expect(minter.secureContext("other.example.com")).not.toBe(first);
  });

  it("evicts the least recently used host beyond its capacity", () => {
    const small = new LeafMinter(ca, { maxCachedContexts: 2 });
    const a = small.secureContext("a.example.com");
    const b = small.secureContext("b.example.com");
    expect(small.secureContext("a.example.com")).toBe(a); // a is now the most recent
    small.secureContext("c.example.com"); // evicts b
    expect(small.cachedContexts).toBe(2);
    expect(small.secureContext("a.example.com")).toBe(a);
    expect(small.secureContext("b.example.com")).not.toBe(b);
  });

  it("starts over after clearCache", () => {
    const first = minter.secureContext("clear.example.com");
    minter.clearCache();
    expect(minter.cachedContexts).toBe(0);
    expect(minter.secureContext("clear.example.com")).not.toBe(first);
  });
});
