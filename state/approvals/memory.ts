// Pending approvals in this broker's memory: the store of a broker that shares none (the home's,
// too: a held request is in this process's memory and ends with it).
import { grantIn } from "./grants.js";
import type { Answer, ApprovalStore, HeldRequest } from "./store.js";

/** One broker's store: everything in memory (pending requests end with the process anyway). */
export class MemoryApprovalStore implements ApprovalStore {
  readonly #pending = new Map<string, HeldRequest>();
  readonly #grants = new Map<string, number>();
  readonly #listeners: ((answer: Answer) => void)[] = [];

  async add(held: HeldRequest): Promise<void> {
    this.#pending.set(held.id, held);
  }

  async list(): Promise<HeldRequest[]> {
    return [...this.#pending.values()];
  }

  async take(id: string): Promise<HeldRequest | undefined> {
    const held = this.#pending.get(id);
    this.#pending.delete(id);
    return held;
  }

  async grant(key: string, until: number): Promise<void> {
    this.#grants.set(key, Math.max(until, this.#grants.get(key) ?? 0));
  }

  async grantedUntil(key: string, now: number): Promise<number | undefined> {
    return grantIn(this.#grants, key, now);
  }

  async publish(answer: Answer): Promise<void> {
    for (const listener of this.#listeners) listener(answer);
  }

  subscribe(listener: (answer: Answer) => void): void {
    this.#listeners.push(listener);
  }
}
