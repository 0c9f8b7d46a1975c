import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { AuditTrail, OPERATIONAL_CODES } from "../../../audit/audit-trail.js";

const homes: string[] = [];
afterEach(() => {
  for (const h of homes.splice(0)) rmSync(h, { recursive: true, force: true });
});

function codes(home: string, chain: "audit" | "security"): string[] {
  return readFileSync(join(home, "audit", `${chain}.jsonl`), "utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => {
      const r = JSON.parse(l) as { decision: string; code?: string };
      return `${r.decision}:${r.code ?? ""}`;
    });
}

describe("AuditTrail: what reaches the security chain", () => {
  it("keeps refusals of traffic control and upstream trouble out of it, and every real refusal in it", async () => {
    const home = mkdtempSync(join(tmpdir(), "kb-trail-"));
    homes.push(home);
    const trail = new AuditTrail(home);
    // The outage's codes, as the trail lists them; two named here so the list cannot go empty.
    const operational = [...OPERATIONAL_CODES];
    expect(operational).toEqual(expect.arrayContaining(["pool_exhausted", "upstream_unreachable"]));
    const security = [
      "placeholder_host_mismatch",
      "policy_denied",
      "host_mismatch",
      "client_unauthorized",
      "upstream_tls",
    ];
    // An upstream outage answers a thousand requests: none of them may rotate the evidence away.
    for (let i = 0; i < 1000; i++)
      trail.record({ decision: "blocked", code: operational[i % operational.length]! });
    for (const code of security) trail.record({ decision: "blocked", code });
    trail.record({ decision: "injected" });
    trail.record({ decision: "reload" });
    await trail.close();

    expect(codes(home, "security")).toEqual([...security.map((c) => `blocked:${c}`), "reload:"]);
    expect(codes(home, "audit")).toHaveLength(1000 + security.length + 2);
  });
});
