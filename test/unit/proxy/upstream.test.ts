import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadOrCreateCa } from "../../../certs/ca.js";
import { createUpstreamConnector, isPrivateAddress, UpstreamTrust } from "../../../proxy/upstream.js";

describe("isPrivateAddress", () => {
  it.each([
    "127.0.0.1",
    "10.1.2.3",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.0",
    "::1",
    "::",
    "fd00::1",
    "fe80::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
  ])("refuses %s", (address) => {
    expect(isPrivateAddress(address)).toBe(true);
  });

  it.each(["8.8.8.8", "172.32.0.1", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8"])(
    "allows %s",
    (address) => {
      expect(isPrivateAddress(address)).toBe(false);
    },
  );
});

describe("UpstreamTrust", () => {
  const home = mkdtempSync(join(tmpdir(), "kb-trust-"));
  const caFile = loadOrCreateCa(home).certPath;

  it("reads upstream_ca when it is made: a missing file fails there, before any connection", () => {
    expect(() => new UpstreamTrust([join(home, "nowhere.pem")])).toThrow(/ENOENT/);
  });

  it("makes one secure context for the same roots, and another when the roots change", () => {
    const system = new UpstreamTrust([]);
    const first = system.context;
    expect(new UpstreamTrust([]).context).toBe(first);
    const withPrivate = new UpstreamTrust([caFile]);
    expect(withPrivate.context).not.toBe(first);
    expect(new UpstreamTrust([caFile]).context).toBe(withPrivate.context);
    // Kept by the trust that made it, whatever is made since.
    expect(system.context).toBe(first);
  });

  it("a context that cannot be made fails the connection that needed it, through its callback", async () => {
    const trust = {
      get context(): never {
        throw new Error("bad roots");
      },
    } as unknown as UpstreamTrust;
    const connect = createUpstreamConnector({
      upstreamCa: [],
      trust,
      policy: { resolve: () => undefined, allowsPrivate: () => true },
    });
    const failed = await new Promise<Error | null>((resolve) =>
      connect(
        { hostname: "example.com", host: "example.com", protocol: "https:", port: "443" } as Parameters<
          typeof connect
        >[0],
        (...args) => resolve(args[0]),
      ),
    );
    expect(failed?.message).toBe("bad roots");
  });
});
