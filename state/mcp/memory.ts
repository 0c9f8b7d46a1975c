// MCP bindings and registrations in one process's memory: the McpStore of brokers that share
// nothing on disk (an in-process test harness). Records are copied in and out, as a store that
// serializes them would.
import type { McpBinding, McpRegistration, McpStore } from "./store.js";

const keyOf = (provider: string, id: string) => JSON.stringify([provider, id]);
const copy = <T>(x: T): T => structuredClone(x);

export class MemoryMcpStore implements McpStore {
  readonly #registrations = new Map<string, McpRegistration>();
  readonly #bindings = new Map<string, McpBinding>();

  async registration(issuer: string): Promise<McpRegistration | undefined> {
    const r = this.#registrations.get(issuer);
    return r === undefined ? undefined : copy(r);
  }

  async putRegistration(r: McpRegistration): Promise<void> {
    this.#registrations.set(r.issuer, copy(r));
  }

  async binding(provider: string, id: string): Promise<McpBinding | undefined> {
    const b = this.#bindings.get(keyOf(provider, id));
    return b === undefined ? undefined : copy(b);
  }

  async putBinding(b: McpBinding): Promise<void> {
    this.#bindings.set(keyOf(b.provider, b.id), copy(b));
  }

  async removeBinding(provider: string, id: string): Promise<void> {
    this.#bindings.delete(keyOf(provider, id));
  }
}
