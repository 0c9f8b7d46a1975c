// The subject hash names files in a CA directory: it must be openssl's own, for every root the
// system holds (PrintableString, UTF8String, BMPString names, odd spacing and case) and the CA.
import { readdirSync, readlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { rootCertificates } from "node:tls";
import { afterAll, describe, expect, it } from "vitest";
import { loadOrCreateCa } from "../../../certs/ca.js";
import { subjectHash } from "../../../certs/subject-hash.js";
import { makeHome, removeHomes, run } from "./helpers.js";

afterAll(removeHomes);

const der = (pem: string) => Buffer.from(pem.replace(/-----[A-Z ]+-----|\s/g, ""), "base64");

describe("subjectHash", () => {
  it("is openssl's subject hash, for every root certificate and the keybroker CA", async () => {
    const dir = makeHome();
    const pems = [...rootCertificates, loadOrCreateCa(makeHome()).certPem];
    pems.forEach((pem, i) => {
      writeFileSync(join(dir, `c${i}.pem`), pem);
    });
    const r = await run("openssl", ["rehash", dir]);
    expect(r.code, r.stderr).toBe(0);
    const theirs = new Map<string, string>(); // c<i>.pem → hash
    for (const link of readdirSync(dir).filter((n) => /^[0-9a-f]{8}\.\d+$/.test(n))) {
      theirs.set(readlinkSync(join(dir, link)), link.slice(0, 8));
    }
    expect(theirs.size).toBe(pems.length);
    const mismatches = pems.filter((pem, i) => subjectHash(der(pem)) !== theirs.get(`c${i}.pem`));
    expect(mismatches).toEqual([]);
  });
});
