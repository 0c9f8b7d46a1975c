import { mkdtempSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { PoolState, readPoolState } from "../../../secrets/pool.js";

const home = () => mkdtempSync(join(tmpdir(), "kb-pool-"));
const members = [{ id: "A" }, { id: "B" }, { id: "C" }];

describe("PoolState", () => {
  it("fill_first keeps to the first usable credential", () => {
    const p = new PoolState(home());
    const spec = { provider: "p", strategy: "fill_first" as const };
    expect(p.pick(spec, members, "c")?.id).toBe("A");
    expect(p.pick(spec, members, "c")?.id).toBe("A");
    p.markUsageLimit("p", "A", Date.now() + 60_000, "HTTP 429");
    expect(p.pick(spec, members, "c")?.id).toBe("B");
  });

  it("round_robin and least_used spread the requests", () => {
    const p = new PoolState(home());
    const rr = [1, 2, 3, 4].map(() => p.pick({ provider: "r", strategy: "round_robin" }, members, "c")?.id);
    expect(rr).toEqual(["A", "B", "C", "A"]);
    const q = new PoolState(home());
    const lu = [1, 2, 3].map(() => q.pick({ provider: "l", strategy: "least_used" }, members, "c")?.id);
    expect(new Set(lu).size).toBe(3);
  });

  it("keeps a client on its credential with affinity until that one is marked", () => {
    const p = new PoolState(home());
    const spec = { provider: "a", strategy: "round_robin" as const, affinity: "client" as const };
    const first = p.pick(spec, members, "alice")!.id;
    expect(p.pick(spec, members, "alice")!.id).toBe(first);
    p.markUsageLimit("a", first, Date.now() + 60_000, "HTTP 429");
    expect(p.pick(spec, members, "alice")!.id).not.toBe(first);
  });

  it("only ever extends a mark's deadline, and drops it when its time has come", () => {
    const p = new PoolState(home());
    const now = Date.now();
    p.markUsageLimit("p", "A", now + 120_000, "first");
    p.markUsageLimit("p", "A", now + 10_000, "earlier");
    expect(p.get("p", "A").until).toBe(now + 120_000);
    expect(p.usable("p", "A", now + 119_000)).toBe(false);
    expect(p.usable("p", "A", now + 121_000)).toBe(true);
  });

  it("ties an invalid mark to the refused value and keeps it as the last resort", () => {
    const p = new PoolState(home());
    const spec = { provider: "p", strategy: "fill_first" as const };
    p.markInvalid("p", "A", "HTTP 401", "sha256:old");
    expect(
      p.pick(
        spec,
        [
          { id: "A", fingerprint: "sha256:old" },
          { id: "B", fingerprint: "sha256:b" },
        ],
        "c",
      )?.id,
    ).toBe("B");
    expect(p.pick(spec, [{ id: "A", fingerprint: "sha256:old" }], "c")?.id).toBe("A");
    expect(p.pick(spec, [{ id: "A", fingerprint: "sha256:new" }, { id: "B" }], "c")?.id).toBe("A");
    expect(p.get("p", "A").state).toBe("ok");
  });

  it("a refused value forgotten because the credential's value changed stays forgotten once written", async () => {
    const h = home();
    const p = new PoolState(h);
    const spec = { provider: "p", strategy: "fill_first" as const };
    p.markInvalid("p", "A", "HTTP 401", "sha256:old");
    await p.durable();
    // A refreshed login (or a rotated key): its new value is picked, the mark forgotten.
    expect(p.pick(spec, [{ id: "A", fingerprint: "sha256:new" }], "c")?.id).toBe("A");
    p.flush();
    // The write takes in what the file holds (the mark, written at once) without bringing it back.
    expect(p.get("p", "A").state).toBe("ok");
    expect(readPoolState(h).p?.A?.state).toBe("ok");
    expect(new PoolState(h).get("p", "A").state).toBe("ok");
    // A later refusal of the new value is a mark again.
    p.markInvalid("p", "A", "HTTP 401", "sha256:new");
    await p.durable();
    expect(readPoolState(h).p?.A?.state).toBe("invalid");
  });

  it("answers undefined when every credential is out of quota, with the earliest reset", () => {
    const p = new PoolState(home());
    const now = Date.now();
    p.markUsageLimit("p", "A", now + 300_000, "x");
    p.markUsageLimit("p", "B", now + 90_000, "x");
    p.markUsageLimit("p", "C", now + 600_000, "x");
    expect(p.pick({ provider: "p", strategy: "fill_first" }, members, "c")).toBeUndefined();
    expect(p.earliestReset("p", ["A", "B", "C"])).toBe(now + 90_000);
  });

  it("persists marks to a 0600 file and reads them back", () => {
    const h = home();
    const p = new PoolState(h);
    p.markUsageLimit("p", "A", Date.now() + 60_000, "HTTP 429");
    p.flush();
    expect(statSync(join(h, "state", "pools.json")).mode & 0o777).toBe(0o600);
    expect(readPoolState(h).p?.A?.state).toBe("usage_limit_reached");
    expect(new PoolState(h).get("p", "A").state).toBe("usage_limit_reached");
    expect(p.reset("p")).toEqual(["A"]);
  });
});
