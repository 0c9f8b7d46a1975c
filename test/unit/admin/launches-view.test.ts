// The admin page names isolated launches (decision 114): the overview lists those running, the
// audit view names the launch of each line.
import { describe, expect, it } from "vitest";
import type { StatusReport } from "../../../admin/status.js";
import { auditPart, overviewPart } from "../../../admin/views.js";
import type { AuditRecord } from "../../../audit/audit-log.js";

const report: StatusReport = {
  running: true,
  version: "test",
  url: "http://127.0.0.1:8899",
  pid: 1,
  ca: undefined,
  rules: "/x/keybroker.yaml",
  providers: [],
  launches: [
    {
      id: "0a1b2c3d4e5f",
      client: "default",
      command: "claude --resume <x>",
      startedAt: new Date().toISOString(),
    },
  ],
};

describe("the admin page and launches", () => {
  it("lists the running launches on the overview, command escaped", () => {
    const page = overviewPart(report, { csrf: "c", role: "owner" }).text;
    expect(page).toContain("Isolated launches");
    expect(page).toContain("<code>0a1b2c3d4e5f</code> · default · ");
    expect(page).toContain("claude --resume &lt;x&gt;");
    expect(overviewPart({ ...report, launches: [] }, { csrf: "c", role: "owner" }).text).not.toContain(
      "Isolated launches",
    );
  });

  it("names the launch of an audit line next to its client", () => {
    const line = {
      time: new Date().toISOString(),
      decision: "injected",
      client: "default",
      launch: "0a1b2c3d4e5f",
      provider: "openai",
      prev: "",
      hash: "",
    } as AuditRecord;
    expect(auditPart([line], undefined).text).toContain("default (launch 0a1b2c3d4e5f) → openai");
  });
});
