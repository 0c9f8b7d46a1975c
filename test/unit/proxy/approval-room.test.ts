// proxy/approval-room.ts: the bound on what one broker holds for approval (decision 108).
import { describe, expect, it } from "vitest";
import { ApprovalRoom } from "../../../proxy/approval-room.js";

const limits = { maxPending: 2, maxBytes: 100 };

describe("ApprovalRoom", () => {
  it("gives at most maxPending places, and one back when a place is released", () => {
    const room = new ApprovalRoom();
    const a = room.enter(limits)!;
    const b = room.enter(limits)!;
    expect(room.enter(limits)).toBeUndefined();
    a.release();
    a.release(); // once only
    expect(room.pending).toBe(1);
    expect(room.enter(limits)).toBeDefined();
    b.release();
  });

  it("counts bytes across places, refuses the ones that would pass maxBytes, and frees them on release", () => {
    const room = new ApprovalRoom();
    const a = room.enter(limits)!;
    const b = room.enter(limits)!;
    expect(a.add(60)).toBe(true);
    expect(b.add(41)).toBe(false); // nothing counted
    expect(b.add(40)).toBe(true);
    expect(room.bytes).toBe(100);
    a.release();
    expect(room.bytes).toBe(40);
    expect(a.add(1)).toBe(false); // a released place counts nothing more
    b.release();
    expect(room).toMatchObject({ pending: 0, bytes: 0 });
  });
});
