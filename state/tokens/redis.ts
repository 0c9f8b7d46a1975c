// OAuth logins in a fleet's Redis (docs/spec.md §8, §17): the TokenStore of fleet mode. One hash field
// per login holds `<generation>:<createdAt>:<sealed login>`: the generation and creation time in
// clear for the server-side checks, the login (tokens included) only sealed (redis/cipher.ts).
//
// The refresh lock is a key set with NX and an expiry that outlives the token endpoint's
// timeout; a write made while holding it is fenced twice on the server: the stored generation
// must be the one the refresh started from, and the lock must still be this holder's. A broker
// that stalled past its lock (a pause, SIGSTOP) therefore writes nothing when it wakes.

import { AsyncLocalStorage } from "node:async_hooks";
import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";
import type { TokenCipher } from "../redis/cipher.js";
import { fromRedis } from "../redis/errors.js";
import { type FleetMessage, fieldOf, parseField, type RedisKeys } from "../redis/keys.js";
import { parseLogin, type StoredLogin, serializeLogin } from "./login.js";
import { type LockOptions, LockTimeoutError, type TokenStore } from "./store.js";

/**
 * Writes a login. KEYS: logins hash, lock key. ARGV: field, value, mode (`put`, `fenced`,
 * `republish`), expected generation, lock token, channel, message.
 * - fenced: only over the expected generation, and only while the lock is ours;
 * - republish: only where the store has no such login, or an older generation of the same one.
 */
const PUT_SCRIPT = `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local mode = ARGV[3]
if mode == 'republish' and cur then
  local cg, cc = string.match(cur, '^(%d+):(%d+):')
  local ng, nc = string.match(ARGV[2], '^(%d+):(%d+):')
  if cc ~= nc or tonumber(cg) >= tonumber(ng) then return 0 end
end
if mode == 'fenced' then
  if ARGV[4] ~= '' and (not cur or string.match(cur, '^(%d+):') ~= ARGV[4]) then return 0 end
  if ARGV[5] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[5] then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PUBLISH', ARGV[6], ARGV[7])
return 1
`;

const REMOVE_SCRIPT = `
local n = redis.call('HDEL', KEYS[1], ARGV[1])
if n == 1 then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return n
`;

/** Releases the lock only when it is still ours. */
const UNLOCK_SCRIPT = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;

type Scripts = Record<string, (...args: string[]) => Promise<number>>;

export class RedisTokenStore implements TokenStore {
  readonly #redis: Redis;
  readonly #keys: RedisKeys;
  readonly #cipher: TokenCipher;
  readonly #self: string;
  readonly #onError: (err: Error) => void;
  readonly #watchers = new Set<(provider: string, id: string) => void>();
  /** The lock this async context holds: its key and token. */
  readonly #holding = new AsyncLocalStorage<{ key: string; token: string }>();

  constructor(
    redis: Redis,
    keys: RedisKeys,
    cipher: TokenCipher,
    opts: { self: string; onError: (err: Error) => void },
  ) {
    this.#redis = redis;
    this.#keys = keys;
    this.#cipher = cipher;
    this.#self = opts.self;
    this.#onError = opts.onError;
    redis.defineCommand("kbPutLogin", { numberOfKeys: 2, lua: PUT_SCRIPT });
    redis.defineCommand("kbRemoveLogin", { numberOfKeys: 1, lua: REMOVE_SCRIPT });
    redis.defineCommand("kbUnlock", { numberOfKeys: 1, lua: UNLOCK_SCRIPT });
  }

  get #scripts(): Scripts {
    return this.#redis as unknown as Scripts;
  }

  #run<T>(op: Promise<T>): Promise<T> {
    return fromRedis(op, this.#onError);
  }

  #open(field: string, value: string): StoredLogin | undefined {
    const m = /^\d+:\d+:(.*)$/s.exec(value);
    const text = m === null ? undefined : this.#cipher.open(m[1]!, this.#keys.logins + field);
    return text === undefined ? undefined : parseLogin(text);
  }

  #seal(login: StoredLogin): string {
    const field = fieldOf(login.provider, login.id);
    return `${login.generation}:${login.createdAt}:${this.#cipher.seal(serializeLogin(login), this.#keys.logins + field)}`;
  }

  async list(provider?: string): Promise<StoredLogin[]> {
    const all = await this.#run(this.#redis.hgetall(this.#keys.logins));
    const out: StoredLogin[] = [];
    for (const [field, value] of Object.entries(all)) {
      const key = parseField(field);
      if (key === undefined || (provider !== undefined && key[0] !== provider)) continue;
      const login = this.#open(field, value);
      if (login !== undefined && login.provider === key[0] && login.id === key[1]) out.push(login);
    }
    return out.sort((a, b) => (a.provider + a.id < b.provider + b.id ? -1 : 1));
  }

  async get(provider: string, id: string): Promise<StoredLogin | undefined> {
    const field = fieldOf(provider, id);
    const value = await this.#run(this.#redis.hget(this.#keys.logins, field));
    const login = value === null ? undefined : this.#open(field, value);
    return login !== undefined && login.provider === provider && login.id === id ? login : undefined;
  }

  #write(login: StoredLogin, mode: "put" | "fenced" | "republish", ifGeneration?: number): Promise<number> {
    const field = fieldOf(login.provider, login.id);
    const lockKey = this.#keys.lock(login.provider, login.id);
    const held = this.#holding.getStore();
    const message: FleetMessage = { t: "login", f: field, from: this.#self };
    return this.#run(
      this.#scripts.kbPutLogin!(
        this.#keys.logins,
        lockKey,
        field,
        this.#seal(login),
        mode,
        ifGeneration === undefined ? "" : String(ifGeneration),
        held?.key === lockKey ? held.token : "",
        this.#keys.channel,
        JSON.stringify(message),
      ),
    );
  }

  async put(login: StoredLogin, ifGeneration?: number): Promise<boolean> {
    const fenced = ifGeneration !== undefined || this.#holding.getStore() !== undefined;
    return (await this.#write(login, fenced ? "fenced" : "put", ifGeneration)) === 1;
  }

  /** Publishes a login this broker holds to a store that lost it (Redis restarted empty). */
  async republish(login: StoredLogin): Promise<boolean> {
    return (await this.#write(login, "republish")) === 1;
  }

  async remove(provider: string, id: string): Promise<boolean> {
    const field = fieldOf(provider, id);
    const message: FleetMessage = { t: "login", f: field, from: this.#self };
    const n = await this.#run(
      this.#scripts.kbRemoveLogin!(this.#keys.logins, field, this.#keys.channel, JSON.stringify(message)),
    );
    return n === 1;
  }

  async withRefreshLock<T>(
    provider: string,
    id: string,
    opts: LockOptions,
    fn: () => Promise<T>,
  ): Promise<T> {
    const key = this.#keys.lock(provider, id);
    const token = `${process.pid}:${randomUUID()}`;
    const deadline = Date.now() + opts.waitMs;
    // No lock, no refresh: a Redis that does not answer makes this throw (never a local refresh).
    while (
      (await this.#run(this.#redis.set(key, token, "PX", Math.max(2000, opts.staleMs), "NX"))) !== "OK"
    ) {
      if (Date.now() >= deadline) {
        throw new LockTimeoutError(
          `the refresh lock of ${provider}/${id} is held by another broker (waited ${opts.waitMs} ms)`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 25 + Math.floor(Math.random() * 50)));
    }
    try {
      return await this.#holding.run({ key, token }, fn);
    } finally {
      await this.#scripts.kbUnlock!(key, token).catch(() => {});
    }
  }

  watch(onChange: (provider: string, id: string) => void): () => void {
    this.#watchers.add(onChange);
    return () => this.#watchers.delete(onChange);
  }

  /** A login changed in the store (a message from another broker, or a merge after an outage). */
  changed(provider: string, id: string): void {
    for (const w of this.#watchers) w(provider, id);
  }
}
