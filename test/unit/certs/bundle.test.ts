import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { rootCertificates } from "node:tls";
import { afterAll, describe, expect, it } from "vitest";
import { SYSTEM_CA_FILE, systemRootsPem, writeTrustBundle } from "../../../certs/bundle.js";
import { loadOrCreateCa } from "../../../certs/ca.js";
import { LeafMinter } from "../../../certs/leaf.js";
import { makeHome, removeHomes, run } from "./helpers.js";

afterAll(removeHomes);

const countCerts = (pem: string): number => pem.split("-----BEGIN CERTIFICATE-----").length - 1;

describe("trust bundle", () => {
  it("reads the distribution's root file when there is one", () => {
    const roots = systemRootsPem();
    if (existsSync(SYSTEM_CA_FILE)) {
      expect(roots.trimEnd()).toBe(readFileSync(SYSTEM_CA_FILE, "utf8").trimEnd());
    } else {
      expect(countCerts(roots)).toBe(rootCertificates.length);
    }
    expect(countCerts(roots)).toBeGreaterThan(10);
  });

  it("falls back to node's built-in roots", () => {
    const roots = systemRootsPem(join(makeHome(), "no-such-file.crt"));
    expect(countCerts(roots)).toBe(rootCertificates.length);
    expect(roots).toContain(rootCertificates[0]!);
    expect(roots.endsWith("\n")).toBe(true);
  });

  it("writes the system roots followed by the CA", () => {
    const home = makeHome();
    const ca = loadOrCreateCa(home);
    const path = writeTrustBundle(ca, home);
    expect(path).toBe(join(home, "ca", "bundle.pem"));
    expect(statSync(path).mode & 0o777).toBe(0o644);

    const bundle = readFileSync(path, "utf8");
    const roots = systemRootsPem();
    expect(bundle.startsWith(roots)).toBe(true);
    expect(bundle.endsWith(ca.certPem.endsWith("\n") ? ca.certPem : `${ca.certPem}\n`)).toBe(true);
    expect(countCerts(bundle)).toBe(countCerts(roots) + 1);
  });

  it("uses the fallback roots in the bundle when the system file is missing, and rewrites in place", () => {
    const home = makeHome();
    const ca = loadOrCreateCa(home);
    const missing = join(home, "missing.crt");
    writeTrustBundle(ca, home);
    const path = writeTrustBundle(ca, home, missing);
    const bundle = readFileSync(path, "utf8");
    expect(countCerts(bundle)).toBe(rootCertificates.length + 1);
    expect(bundle).toContain(rootCertificates[0]!);
    expect(bundle).toContain(ca.certPem.trim());
  });

  it("is a CA file openssl can verify a leaf against", async () => {
    const home = makeHome();
    const ca = loadOrCreateCa(home);
    const bundlePath = writeTrustBundle(ca, home);
    const leafPath = join(home, "leaf.pem");
    writeFileSync(leafPath, new LeafMinter(ca).mint("api.example.com").certPem);
    const out = await run("openssl", ["verify", "-x509_strict", "-CAfile", bundlePath, leafPath]);
    expect(out.code).toBe(0);
    expect(out.stdout).toContain("OK");
  });
});
