import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { rootCertificates } from "node:tls";
import { afterAll, describe, expect, it } from "vitest";
import { bundleDirFor, systemRootsPem, writeTrustBundle } from "../../../certs/bundle.js";
import { loadOrCreateCa } from "../../../certs/ca.js";
import { LeafMinter } from "../../../certs/leaf.js";
import { KNOWN_CA_FILES, type SystemRootsOptions } from "../../../certs/system-roots.js";
import { ROOT } from "../../helpers/broker.js";
import { makeHome, removeHomes, run } from "./helpers.js";

afterAll(removeHomes);

const countCerts = (pem: string): number => pem.split("-----BEGIN CERTIFICATE-----").length - 1;
const DEBIAN = "/etc/ssl/certs/ca-certificates.crt";
/** The lookup of a runtime without its own system store (Node 20), over these files only. */
const files = (...knownFiles: string[]): SystemRootsOptions => ({
  env: {},
  knownFiles,
  systemStore: () => undefined,
});

/** A corporate root: a CA of its own, placed where the system keeps its roots. */
function corporateStore(): { store: string; leaf: string; caPem: string } {
  const home = makeHome();
  const corporate = loadOrCreateCa(home);
  const store = join(home, "ca-certificates.crt");
  writeFileSync(store, `${rootCertificates.slice(0, 3).join("\n")}\n${corporate.certPem}`);
  const leaf = join(home, "leaf.pem");
  writeFileSync(leaf, new LeafMinter(corporate).mint("intranet.example").certPem);
  return { store, leaf, caPem: corporate.certPem.trim() };
}

describe("system roots", () => {
  it("looks in every distribution's place, Debian's first", () => {
    expect(KNOWN_CA_FILES[0]).toBe(DEBIAN);
    expect(KNOWN_CA_FILES).toContain("/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem");
    expect(KNOWN_CA_FILES).toContain("/etc/ssl/cert.pem");
  });

  it("reads the distribution's root file when there is one", () => {
    const roots = systemRootsPem(files(join(makeHome(), "absent.crt"), DEBIAN));
    if (existsSync(DEBIAN)) expect(countCerts(roots)).toBe(countCerts(readFileSync(DEBIAN, "utf8")));
    expect(countCerts(roots)).toBeGreaterThan(10);
  });

  it("falls back to node's built-in roots", () => {
    const roots = systemRootsPem(files(join(makeHome(), "no-such-file.crt")));
    expect(countCerts(roots)).toBe(rootCertificates.length);
    expect(roots).toContain(rootCertificates[0]!);
    expect(roots.endsWith("\n")).toBe(true);
  });

  it("takes a corporate root from the system store file", () => {
    const { store, caPem } = corporateStore();
    const roots = systemRootsPem(files(store, DEBIAN));
    expect(roots).toContain(caPem);
    expect(countCerts(roots)).toBe(4);
  });

  it("takes the runtime's own system store where it has one (Node 22.15+)", () => {
    const { caPem } = corporateStore();
    const roots = systemRootsPem({ env: {}, knownFiles: [DEBIAN], systemStore: () => [caPem] });
    expect(countCerts(roots)).toBe(1);
    expect(roots).toContain(caPem);
  });

  it("adds SSL_CERT_FILE and NODE_EXTRA_CA_CERTS of the environment, each root once", () => {
    const a = corporateStore();
    const c = loadOrCreateCa(makeHome());
    const extra = join(makeHome(), "extra.pem");
    writeFileSync(extra, `${c.certPem}\n${a.caPem}\n`);
    const roots = systemRootsPem({
      env: { SSL_CERT_FILE: a.store, NODE_EXTRA_CA_CERTS: extra },
      knownFiles: [],
      systemStore: () => undefined,
    });
    for (const pem of [a.caPem, c.certPem.trim()]) expect(roots).toContain(pem);
    expect(countCerts(roots)).toBe(3 + 2);
  });
});

describe("trust bundle", () => {
  it("writes the system roots followed by the CA", () => {
    const home = makeHome();
    const ca = loadOrCreateCa(home);
    const path = writeTrustBundle(ca, home);
    expect(path).toBe(join(home, "ca", "bundle.pem"));
    expect(statSync(path).mode & 0o777).toBe(0o644);

    const bundle = readFileSync(path, "utf8");
    const roots = systemRootsPem();
    expect(bundle.startsWith(roots)).toBe(true);
    expect(bundle.endsWith(`${ca.certPem.trim()}\n`)).toBe(true);
    expect(countCerts(bundle)).toBe(countCerts(roots) + 1);
  });

  it("uses the fallback roots in the bundle when the system file is missing, and rewrites in place", () => {
    const home = makeHome();
    const ca = loadOrCreateCa(home);
    writeTrustBundle(ca, home);
    const path = writeTrustBundle(ca, home, files(join(home, "missing.crt")));
    const bundle = readFileSync(path, "utf8");
    expect(countCerts(bundle)).toBe(rootCertificates.length + 1);
    expect(bundle).toContain(rootCertificates[0]!);
    expect(bundle).toContain(ca.certPem.trim());
    expect(readdirSync(bundleDirFor(path))).toHaveLength(rootCertificates.length + 1);
  });

  it("does not grow when the environment's SSL_CERT_FILE is the bundle itself (a nested run)", () => {
    const home = makeHome();
    const ca = loadOrCreateCa(home);
    const path = writeTrustBundle(ca, home);
    const first = readFileSync(path, "utf8");
    writeTrustBundle(ca, home, { env: { SSL_CERT_FILE: path } });
    expect(readFileSync(path, "utf8")).toBe(first);
  });

  it("survives processes rewriting it at once (two commands starting a broker from one home)", async () => {
    const home = makeHome();
    loadOrCreateCa(home);
    // Two small root sets taken in turn, so that every call rewrites the folder, quickly.
    writeFileSync(join(home, "one.crt"), `${rootCertificates[0]}\n`);
    writeFileSync(join(home, "two.crt"), `${rootCertificates.slice(1, 3).join("\n")}\n`);
    const script = `
      import { writeTrustBundle } from ${JSON.stringify(join(ROOT, "dist/certs/bundle.js"))};
      import { loadOrCreateCa } from ${JSON.stringify(join(ROOT, "dist/certs/ca.js"))};
      const home = process.argv[1];
      const ca = loadOrCreateCa(home);
      const roots = (f) => ({ env: {}, knownFiles: [home + "/" + f], systemStore: () => undefined });
      const sets = [roots("one.crt"), roots("two.crt")];
      for (let i = 0; i < 400; i++) writeTrustBundle(ca, home, sets[i % 2]);
    `;
    const runs = await Promise.all(
      Array.from({ length: 4 }, () => run(process.execPath, ["--input-type=module", "-e", script, home])),
    );
    for (const r of runs) expect(r.stderr).toBe("");
    expect(runs.map((r) => r.code)).toEqual([0, 0, 0, 0]);
    // What is left is one whole folder, and nothing of the writers' own.
    const left = readdirSync(join(home, "ca")).filter((f) => f.startsWith("bundle.d"));
    expect(left).toEqual(["bundle.d"]);
    expect(readdirSync(join(home, "ca", "bundle.d")).length).toBeGreaterThanOrEqual(2);
  }, 60_000);

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

  it("comes with a CA directory (SSL_CERT_DIR) openssl finds the CA and the system roots in", async () => {
    const home = makeHome();
    const ca = loadOrCreateCa(home);
    const { store, leaf } = corporateStore();
    const bundlePath = writeTrustBundle(ca, home, files(store));
    const dir = bundleDirFor(bundlePath);
    expect(dir).toBe(join(home, "ca", "bundle.d"));
    const ours = join(home, "leaf.pem");
    writeFileSync(ours, new LeafMinter(ca).mint("api.example.com").certPem);
    // -no-CAfile: the directory alone must do, as for a tool that reads only SSL_CERT_DIR.
    for (const cert of [ours, leaf]) {
      const out = await run("openssl", ["verify", "-x509_strict", "-no-CAfile", "-CApath", dir, cert]);
      expect(out.stdout + out.stderr).toContain("OK");
      expect(out.code).toBe(0);
    }
  });

  it("trusts a corporate root placed in the system store", async () => {
    const home = makeHome();
    const ca = loadOrCreateCa(home);
    const { store, leaf } = corporateStore();
    const bundlePath = writeTrustBundle(ca, home, files(store, DEBIAN));
    const out = await run("openssl", ["verify", "-x509_strict", "-CAfile", bundlePath, leaf]);
    expect(out.stdout).toContain("OK");
    // Without the store, the same leaf is not trusted: the root came from there.
    const plain = writeTrustBundle(ca, makeHome(), files(DEBIAN));
    expect((await run("openssl", ["verify", "-CAfile", plain, leaf])).code).not.toBe(0);
  });
});
