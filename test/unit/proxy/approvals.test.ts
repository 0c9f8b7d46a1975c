import { describe, expect, it } from "vitest";
import { knownSecrets } from "../../../core/scrub.js";
import { type ApprovalEvent, Approvals, ruleIdentity } from "../../../proxy/approvals.js";
import { bodyPreview, PREVIEW_BYTES } from "../../../proxy/stages/hold-for-approval.js";
import type { PolicyRule } from "../../../rules/types.js";
import { MemoryApprovalStore } from "../../../state/approvals/memory.js";
import type { ApprovalRequest } from "../../../state/approvals/store.js";

const REQUEST: ApprovalRequest = {
  client: "agent",
  provider: "github",
  method: "PUT",
  host: "api.github.com",
  path: "/repos/o/r/branches/main",
  rule: "5d2c9e1f0a7b3c64",
};

function registry() {
  const events: ApprovalEvent[] = [];
  const approvals = new Approvals({ onEvent: (e) => events.push(e), store: new MemoryApprovalStore() });
  const changes: string[] = [];
  approvals.onChange((c) => changes.push(`${c.type} ${c.id}`));
  return { approvals, events, changes };
}

/** Holds REQUEST and resolves with its id once it is pending. */
async function holdOne(approvals: Approvals, gone = new AbortController().signal, timeoutMs = 60_000) {
  const answer = approvals.hold(REQUEST, "{}", timeoutMs, gone);
  for (;;) {
    const [first] = await approvals.list();
    if (first !== undefined) return { id: first.id, answer };
    await new Promise((r) => setImmediate(r));
  }
}

describe("the approvals registry", () => {
  it("lists a held request, and exactly one answer wins", async () => {
    const { approvals, events, changes } = registry();
    const { id, answer } = await holdOne(approvals);
    const [view] = await approvals.list();
    expect(view).toMatchObject({
      ...{ id, client: "agent", provider: "github", method: "PUT" },
      preview: "{}",
    });
    expect(view!.seconds_left).toBe(60);
    const [approved, denied] = await Promise.all([approvals.approve(id, "me"), approvals.deny(id, "you")]);
    expect(approved?.id).toBe(id);
    expect(denied).toBeUndefined();
    expect((await answer).outcome).toBe("approved");
    expect(events.map((e) => e.decision)).toEqual(["held", "approved"]);
    expect(events[1]!.by).toBe("me");
    expect(changes).toEqual([`held ${id}`, `answered ${id}`]);
    expect(await approvals.list()).toEqual([]);
  });

  it("a client that goes away withdraws its request; a later answer finds nothing", async () => {
    const { approvals, events } = registry();
    const gone = new AbortController();
    const { id, answer } = await holdOne(approvals, gone.signal);
    gone.abort();
    expect((await answer).outcome).toBe("withdrawn");
    expect(await approvals.approve(id, "me")).toBeUndefined();
    expect(events.map((e) => e.decision)).toEqual(["held", "withdrawn"]);
  });

  it("times out", async () => {
    const { approvals } = registry();
    const answer = approvals.hold(REQUEST, "", 5, new AbortController().signal);
    expect((await answer).outcome).toBe("approval_timeout");
    expect(await approvals.list()).toEqual([]);
  });

  it("--for covers the same client, provider and rule only", async () => {
    const { approvals, events } = registry();
    const { id } = await holdOne(approvals);
    await approvals.approve(id, "me", 60_000);
    expect(await approvals.covered(REQUEST)).toBe(true);
    expect(events.at(-1)).toMatchObject({ decision: "approved", by: "an earlier approve --for" });
    expect(await approvals.covered({ ...REQUEST, rule: "7e6f5a4b3c2d1e0f" })).toBe(false);
    expect(await approvals.covered({ ...REQUEST, client: "other" })).toBe(false);
    expect(await approvals.covered({ ...REQUEST, provider: "gitlab" })).toBe(false);
  });
});

describe("the body preview", () => {
  it("masks known secrets, even one across the 2 KiB cut, and secret-shaped strings", () => {
    const secret = "sk-known-secret-value-0123456789abcdef";
    knownSecrets.add(secret);
    const body = Buffer.from(`${"a".repeat(PREVIEW_BYTES - 10)}${secret} and more`);
    const preview = bodyPreview(body, undefined);
    expect(preview).not.toContain(secret.slice(0, 10));
    expect(preview.length).toBeLessThanOrEqual(PREVIEW_BYTES + 1);
    const shaped = bodyPreview(
      Buffer.from('{"token":"ghp_abcdefghijklmnopqrstuvwxyz0123456789"}'),
      undefined,
    );
    expect(shaped).not.toContain("ghp_abcdefghijklmnopqrstuvwxyz0123456789");
  });

  it("describes binary and encoded bodies instead of showing them", () => {
    expect(bodyPreview(Buffer.from([1, 0, 2]), undefined)).toBe("[3 bytes of binary data]");
    expect(bodyPreview(Buffer.from("x"), "gzip")).toBe("[1 bytes, gzip-encoded]");
    expect(bodyPreview(undefined, undefined)).toBe("");
  });
});

describe("ruleIdentity", () => {
  it("names a rule by what it matches, not by where it stands, and tells different rules apart", () => {
    const branches: PolicyRule = {
      action: "approve",
      methods: ["PUT", "PATCH"],
      paths: ["/repos/*/*/branches/**"],
    };
    const moved: PolicyRule = {
      action: "approve",
      methods: ["PATCH", "PUT"],
      paths: ["/repos/*/*/branches/**"],
      timeoutMs: 5_000,
    };
    const deletes: PolicyRule = { action: "approve", methods: ["DELETE"], paths: ["/repos/**"] };
    const scoped: PolicyRule = { ...branches, roles: ["guest"] };
    expect(ruleIdentity(moved)).toBe(ruleIdentity(branches));
    expect(new Set([branches, deletes, scoped].map(ruleIdentity)).size).toBe(3);
  });

  it("case: insensitive makes another rule; a rule without it keeps the id it had before (decision 103)", () => {
    const branches: PolicyRule = {
      action: "approve",
      methods: ["PUT", "PATCH"],
      paths: ["/repos/*/*/branches/**"],
    };
    // What a broker of the previous version named this rule (a fleet being upgraded).
    expect(ruleIdentity(branches)).toBe("3c89a10fbe2b79f8");
    expect(ruleIdentity({ ...branches, ignoreCase: true })).not.toBe(ruleIdentity(branches));
  });
});
