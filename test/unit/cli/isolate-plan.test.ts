import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { assertIsolationAvailable, namespaceRefusal, parseAllowConnect } from "../../../cli/isolate/plan.js";
import { UsageError, UserError } from "../../../core/errors.js";

/** A fake /proc/sys with the given settings, for namespaceRefusal's `root`. */
function procSys(settings: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), "kb-procsys-"));
  for (const [path, value] of Object.entries(settings)) {
    mkdirSync(join(root, path, ".."), { recursive: true });
    writeFileSync(join(root, path), `${value}\n`);
  }
  return root;
}

describe("--isolate where there are no namespaces", () => {
  it("says it is not available on this platform yet (exit 1), on macOS and Windows", () => {
    for (const platform of ["darwin", "win32"] as const) {
      expect(() => assertIsolationAvailable(platform)).toThrow(UserError);
      expect(() => assertIsolationAvailable(platform)).toThrow(
        `--isolate is not available on ${platform} yet`,
      );
    }
    expect(() => assertIsolationAvailable("linux")).not.toThrow();
  });
});

describe("namespaceRefusal", () => {
  it("names the sysctl that forbids unprivileged user namespaces, and root as the other way", () => {
    const debian = procSys({ "proc/sys/kernel/unprivileged_userns_clone": "0" });
    expect(namespaceRefusal(1000, debian)).toContain("kernel.unprivileged_userns_clone is 0");
    expect(namespaceRefusal(1000, debian)).toContain("or run keybroker as root");
    const ubuntu = procSys({ "proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1" });
    expect(namespaceRefusal(1000, ubuntu)).toContain("kernel.apparmor_restrict_unprivileged_userns=1");
    const none = procSys({ "proc/sys/user/max_user_namespaces": "0" });
    expect(namespaceRefusal(0, none)).toContain("user.max_user_namespaces is 0");
    expect(namespaceRefusal(0, none)).not.toContain("as root");
  });

  it("points at unshare's own message when no setting explains it", () => {
    expect(namespaceRefusal(1000, procSys({}))).toContain("see unshare's message above");
  });
});

describe("parseAllowConnect", () => {
  it("gives each destination its own loopback address inside", () => {
    expect(parseAllowConnect(["github.com:22", "Git.Example:2222"])).toEqual([
      { host: "github.com", port: 22, address: "127.0.0.2" },
      { host: "git.example", port: 2222, address: "127.0.0.3" },
    ]);
  });

  it("refuses anything but host:port with a usage error that shows the form", () => {
    for (const bad of ["github.com", "github.com:0", "github.com:70000", "a b:22", "[::1]:22"]) {
      expect(() => parseAllowConnect([bad])).toThrow(UsageError);
      expect(() => parseAllowConnect([bad])).toThrow("--allow-connect wants host:port");
    }
  });
});
