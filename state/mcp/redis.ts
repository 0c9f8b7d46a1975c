// MCP logins' bindings and client registrations in a fleet's Redis (docs/spec.md §15, §17): the
// McpStore of fleet mode, on the state's one command connection, so that any broker refreshes
// an MCP login any machine made. Two hashes: `<prefix>mcp:bindings` (field: the login, as in
// the logins hash) and `<prefix>mcp:registrations` (field: the issuer). Each value is the whole
// record sealed (redis/cipher.ts, bound to its key and field): a registration may hold a client
// secret, and a binding names the token endpoint the refresh token and that secret are sent to,
// so neither can be read or rewritten by whoever can write to Redis without the home key.
//
// Read at refresh time only, never on the request path. A copy of the sealed values is kept in
// memory (pulled at every merge, and per login as its change is announced), so that a Redis
// that restarted empty gets back the binding and registration of every MCP login a broker
// holds, with the login, not the login alone.
import type { Redis } from "ioredis";
import type { TokenCipher } from "../redis/cipher.js";
import { fromRedis } from "../redis/errors.js";
import { fieldOf } from "../redis/keys.js";
import type { StoredLogin } from "../tokens/login.js";
import type { McpBinding, McpRegistration, McpStore } from "./store.js";

export class RedisMcpStore implements McpStore {
  readonly #redis: Redis;
  readonly #cipher: TokenCipher;
  readonly #onError: (err: Error) => void;
  readonly #bindingsKey: string;
  readonly #registrationsKey: string;
  /** The sealed values last seen in Redis (or written from here): field → value. */
  readonly #bindings = new Map<string, string>();
  readonly #registrations = new Map<string, string>();

  constructor(redis: Redis, prefix: string, cipher: TokenCipher, opts: { onError: (err: Error) => void }) {
    this.#redis = redis;
    this.#cipher = cipher;
    this.#onError = opts.onError;
    this.#bindingsKey = `${prefix}mcp:bindings`;
    this.#registrationsKey = `${prefix}mcp:registrations`;
  }

  #run<T>(op: Promise<T>): Promise<T> {
    return fromRedis(op, this.#onError);
  }

  #open<T>(key: string, field: string, value: string | null): T | undefined {
    const text = value === null ? undefined : this.#cipher.open(value, key + field);
    if (text === undefined) return undefined;
    try {
      return JSON.parse(text) as T;
    } catch {
      return undefined;
    }
  }

  #remember(into: Map<string, string>, field: string, value: string | null): void {
    if (value === null) into.delete(field);
    else into.set(field, value);
  }

  async registration(issuer: string): Promise<McpRegistration | undefined> {
    const value = await this.#run(this.#redis.hget(this.#registrationsKey, issuer));
    this.#remember(this.#registrations, issuer, value);
    const r = this.#open<McpRegistration>(this.#registrationsKey, issuer, value);
    return r?.issuer === issuer && typeof r.clientId === "string" ? r : undefined;
  }

  async putRegistration(r: McpRegistration): Promise<void> {
    const value = this.#cipher.seal(JSON.stringify(r), this.#registrationsKey + r.issuer);
    await this.#run(this.#redis.hset(this.#registrationsKey, r.issuer, value));
    this.#registrations.set(r.issuer, value);
  }

  async binding(provider: string, id: string): Promise<McpBinding | undefined> {
    const field = fieldOf(provider, id);
    const value = await this.#run(this.#redis.hget(this.#bindingsKey, field));
    this.#remember(this.#bindings, field, value);
    const b = this.#open<McpBinding>(this.#bindingsKey, field, value);
    return b?.provider === provider && b.id === id ? b : undefined;
  }

  async putBinding(b: McpBinding): Promise<void> {
    const field = fieldOf(b.provider, b.id);
    const value = this.#cipher.seal(JSON.stringify(b), this.#bindingsKey + field);
    await this.#run(this.#redis.hset(this.#bindingsKey, field, value));
    this.#bindings.set(field, value);
  }

  async removeBinding(provider: string, id: string): Promise<void> {
    const field = fieldOf(provider, id);
    await this.#run(this.#redis.hdel(this.#bindingsKey, field));
    this.#bindings.delete(field);
  }

  /** A login changed somewhere in the fleet: keep its binding's copy current (best effort). */
  follow(provider: string, id: string): void {
    this.binding(provider, id).catch(() => {});
  }

  /** Replaces the copies with what Redis holds (after a merge, Redis is the truth). */
  async pull(): Promise<void> {
    const [bindings, registrations] = await Promise.all([
      this.#redis.hgetall(this.#bindingsKey),
      this.#redis.hgetall(this.#registrationsKey),
    ]);
    for (const [into, now] of [
      [this.#bindings, bindings],
      [this.#registrations, registrations],
    ] as const) {
      into.clear();
      for (const [field, value] of Object.entries(now)) into.set(field, value);
    }
  }

  /**
   * Puts back, where Redis has none (it restarted empty), the binding of each login held and
   * the registration its client needs. Runs before the logins themselves are put back.
   */
  async republish(held: readonly StoredLogin[]): Promise<void> {
    for (const login of held) {
      const field = fieldOf(login.provider, login.id);
      const value = this.#bindings.get(field);
      if (value === undefined) continue;
      await this.#redis.hsetnx(this.#bindingsKey, field, value);
      const b = this.#open<McpBinding>(this.#bindingsKey, field, value);
      const registration = b === undefined ? undefined : this.#registrations.get(b.server.issuer);
      if (b?.clientSource === "registered" && registration !== undefined)
        await this.#redis.hsetnx(this.#registrationsKey, b.server.issuer, registration);
    }
  }
}
