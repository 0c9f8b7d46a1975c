import { generateKeyPairSync, verify, X509Certificate } from "node:crypto";
import { chmodSync, existsSync, readFileSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { inspect } from "node:util";
import forge from "node-forge";
import { afterAll, describe, expect, it } from "vitest";
import { loadOrCreateCa } from "../../../certs/ca.js";
import { ROOT } from "../../helpers/broker.js";
import { makeHome, removeHomes, run } from "./helpers.js";

afterAll(removeHomes);

const mode = (path: string): number => statSync(path).mode & 0o777;

interface ParsedExtension {
  critical?: boolean;
  cA?: boolean;
  pathLenConstraint?: number;
  keyCertSign?: boolean;
  cRLSign?: boolean;
  digitalSignature?: boolean;
  subjectKeyIdentifier?: string;
}

describe("loadOrCreateCa", () => {
  it("creates the CA files with private modes", () => {
    const home = makeHome();
    const ca = loadOrCreateCa(home);
    expect(ca.certPath).toBe(join(home, "ca", "ca.pem"));
    expect(ca.keyPath).toBe(join(home, "ca", "ca-key.pem"));
    expect(mode(join(home, "ca"))).toBe(0o700);
    expect(mode(ca.keyPath)).toBe(0o600);
    expect(mode(ca.certPath)).toBe(0o644);
    expect(readFileSync(ca.certPath, "utf8")).toBe(ca.certPem);
    expect(readFileSync(ca.keyPath, "utf8")).toContain("-----BEGIN PRIVATE KEY-----");
  });

  it("builds a CA certificate with the expected name, extensions and validity", async () => {
    const ca = loadOrCreateCa(makeHome());
    const x509 = new X509Certificate(ca.certPem);
    expect(x509.ca).toBe(true);
    expect(x509.verify(x509.publicKey)).toBe(true);
    expect(x509.subject).toBe(x509.issuer);
    expect(x509.subject).toContain("CN=keybroker local CA");
    expect(x509.subject).toContain("O=keybroker");
    expect(x509.subject).toContain(`OU=${hostname()}`);
    expect(x509.publicKey.asymmetricKeyDetails?.modulusLength).toBe(2048);

    const years = (Date.parse(x509.validTo) - Date.parse(x509.validFrom)) / (365.25 * 24 * 3600 * 1000);
    expect(years).toBeGreaterThan(9.99);
    expect(years).toBeLessThan(10.01);

    const cert = forge.pki.certificateFromPem(ca.certPem);
    expect(cert.serialNumber).toHaveLength(32);
    expect(Number.parseInt(cert.serialNumber.slice(0, 2), 16)).toBeLessThan(0x80);
    expect(cert.serialNumber.slice(0, 2)).not.toBe("00");

    const basic = cert.getExtension("basicConstraints") as ParsedExtension;
    expect(basic).toMatchObject({ critical: true, cA: true, pathLenConstraint: 0 });
    const usage = cert.getExtension("keyUsage") as ParsedExtension;
    expect(usage).toMatchObject({
      critical: true,
      keyCertSign: true,
      cRLSign: true,
      digitalSignature: false,
    });
    const ski = cert.getExtension("subjectKeyIdentifier") as ParsedExtension;
    expect(ski.subjectKeyIdentifier).toBe(ca.keyId.toString("hex"));
    expect(ca.keyId).toHaveLength(20);

    const selfCheck = await run("openssl", ["verify", "-x509_strict", "-CAfile", ca.certPath, ca.certPath]);
    expect(selfCheck.code).toBe(0);
    expect(selfCheck.stdout).toContain("OK");
  });

  it("reports the same SHA-256 fingerprint as openssl", async () => {
    const ca = loadOrCreateCa(makeHome());
    const out = await run("openssl", ["x509", "-in", ca.certPath, "-noout", "-fingerprint", "-sha256"]);
    expect(out.code).toBe(0);
    expect(out.stdout.trim().split("=")[1]).toBe(ca.fingerprint256);
    expect(ca.fingerprint256).toMatch(/^([0-9A-F]{2}:){31}[0-9A-F]{2}$/);
  });

  it("loads the same CA on the next start", () => {
    const home = makeHome();
    const first = loadOrCreateCa(home);
    const second = loadOrCreateCa(home);
    expect(second.fingerprint256).toBe(first.fingerprint256);
    expect(second.certPem).toBe(first.certPem);
    expect(second.keyId.equals(first.keyId)).toBe(true);
  });

  it("tightens a key file that group or others can read", () => {
    const home = makeHome();
    const first = loadOrCreateCa(home);
    chmodSync(first.keyPath, 0o644);
    expect(mode(first.keyPath)).toBe(0o644);
    chmodSync(join(home, "ca"), 0o755);
    const second = loadOrCreateCa(home);
    expect(mode(second.keyPath)).toBe(0o600);
    expect(mode(join(home, "ca"))).toBe(0o700);
    expect(second.fingerprint256).toBe(first.fingerprint256);
  });

  it("never prints the private key", () => {
    const ca = loadOrCreateCa(makeHome());
    const keyPem = readFileSync(ca.keyPath, "utf8");
    const keyBody = keyPem.split("\n")[1]!;
    for (const text of [JSON.stringify(ca), inspect(ca, { depth: 10, showHidden: true }), String(ca)]) {
      expect(text).not.toContain("PRIVATE KEY");
      expect(text).not.toContain(keyBody);
      expect(text).toContain(ca.fingerprint256);
      expect(text).toContain(ca.certPath);
    }
  });

  it("signs with the CA key", () => {
    const ca = loadOrCreateCa(makeHome());
    const data = Buffer.from("tbs bytes");
    expect(verify("sha256", data, ca.publicKey, ca.sign(data))).toBe(true);
  });

  it("makes a certificate for a key left without one", () => {
    const home = makeHome();
    const first = loadOrCreateCa(home);
    unlinkSync(first.certPath);
    const second = loadOrCreateCa(home);
    expect(existsSync(second.certPath)).toBe(true);
    expect(second.fingerprint256).not.toBe(first.fingerprint256);
    expect(new X509Certificate(second.certPem).publicKey.equals(first.publicKey)).toBe(true);
  });

  it("refuses a certificate whose key is missing", () => {
    const home = makeHome();
    const first = loadOrCreateCa(home);
    unlinkSync(first.keyPath);
    expect(() => loadOrCreateCa(home)).toThrow(/key .* is missing/);
  });

  it("refuses a key that does not match the certificate", () => {
    const home = makeHome();
    const first = loadOrCreateCa(home);
    const other = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey;
    writeFileSync(first.keyPath, other.export({ type: "pkcs8", format: "pem" }));
    expect(() => loadOrCreateCa(home)).toThrow(/does not hold the private key/);
  });

  it("gives processes that make it at once from a new home one CA, the one on disk", async () => {
    // Two commands started together from a new home (the CLI fuzz test's three workers) each made
    // a key and a certificate: the files could end up from different processes, which every
    // later start refused, and a process could go on with a CA that was not the one on disk.
    const script = `
      import { readFileSync } from "node:fs";
      import { X509Certificate } from "node:crypto";
      import { loadOrCreateCa } from ${JSON.stringify(join(ROOT, "dist/certs/ca.js"))};
      const ca = loadOrCreateCa(process.argv[1]);
      const disk = new X509Certificate(readFileSync(ca.certPath)).fingerprint256;
      console.log(ca.fingerprint256 + " " + disk);
    `;
    for (let round = 0; round < 6; round++) {
      const home = makeHome();
      const runs = await Promise.all(
        Array.from({ length: 4 }, () => run(process.execPath, ["--input-type=module", "-e", script, home])),
      );
      for (const r of runs) expect(r.stderr).toBe("");
      expect(runs.map((r) => r.code)).toEqual([0, 0, 0, 0]);
      const seen = new Set(runs.flatMap((r) => r.stdout.trim().split(" ")));
      expect(seen.size).toBe(1);
      // And the pair on disk is whole for the next start.
      expect(loadOrCreateCa(home).fingerprint256).toBe([...seen][0]);
    }
  }, 120_000);
});
