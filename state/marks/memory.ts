// Marks shared by brokers in one process (an in-process test harness, several listeners of one
// program): a mark or reset made by one holder reaches the others at once, merged by the one
// rule on their side (`MarkHolder.merge`). Nothing leaves the process; each holder still keeps
// its own home file for a restart.
import type { MarkHolder, MarkStore } from "./store.js";

/** The place the holders of one set of brokers meet; give the same one to each broker's store. */
export class MarkRoom {
  readonly holders = new Set<MarkHolder>();
}

export class MemoryMarkStore implements MarkStore {
  readonly #room: MarkRoom;

  constructor(room = new MarkRoom()) {
    this.#room = room;
  }

  attachPools(pools: MarkHolder): void {
    const others = () => [...this.#room.holders].filter((h) => h !== pools);
    const now = Date.now();
    // Both ways at once: what the others hold comes in, what this one holds goes out.
    for (const other of others()) {
      for (const { provider, id, mark } of other.marks(now)) pools.merge(provider, id, mark, now);
      for (const { provider, id, mark } of pools.marks(now)) other.merge(provider, id, mark, now);
    }
    this.#room.holders.add(pools);
    pools.mirrorTo({
      mark: (provider, id, mark) => {
        for (const other of others()) other.merge(provider, id, mark);
      },
      reset: (provider, id, at) => {
        for (const other of others()) other.mergeReset(provider, id, at);
      },
    });
  }

  /** The holder leaves the room (its broker stopped). */
  detach(pools: MarkHolder): void {
    this.#room.holders.delete(pools);
  }
}
