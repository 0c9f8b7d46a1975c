// Pool marks in a fleet's Redis (docs/spec.md §17): the MarkStore of fleet mode, on the state's command
// connection (redis/state.ts owns it, the subscriber and the resync). The request path never
// waits on Redis: a mark made here is sent after the local change, one from another broker
// arrives as a message and is merged into the pool's memory.
//
// Marks are sealed (sealed.ts, decision 111), so the server cannot compare deadlines: the broker
// reads the field, merges by the one rule (merge.ts `mergeMark`) and writes the result only if
// the field still holds what it read (a compare-and-set script), else reads again. A value that
// does not open is no mark: skipped, reported once, and overwritten by the next one.
//
// A reset deletes the marks and leaves a sealed tombstone with its time in the `resets` hash: a
// mark made before it, put back by a Redis writer from an earlier read, is not taken in, and a
// broker that starts later learns the reset from it (decision 137).
import type { Redis } from "ioredis";
import type { TokenCipher } from "../redis/cipher.js";
import { type FleetMessage, fieldOf, parseField } from "../redis/keys.js";
import { mergeMark, type SharedMark } from "./merge.js";
import { type MarkMessage, SealedMarks } from "./sealed.js";
import type { MarkHolder, MarkStore } from "./store.js";

/** Compare-and-set rounds for one mark before it waits for the next sync (others kept writing). */
const MARK_ATTEMPTS = 8;

/**
 * Writes a mark only where the field still holds what the broker read and merged with (ARGV[2],
 * '' for none), and publishes it; else returns the value there now. KEYS: marks hash. ARGV:
 * field, expected, value, channel, message.
 */
const MARK_SCRIPT = `
local cur = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if cur ~= ARGV[2] then return {0, cur} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return {1, ARGV[3]}
`;

/**
 * Clears one mark (ARGV[1] a field) or a provider's (ARGV[2] a field prefix), leaves the reset's
 * sealed tombstone (ARGV[5] its field, ARGV[6] it), then publishes. KEYS: marks, tombstones.
 */
const RESET_SCRIPT = `
redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
if ARGV[1] ~= '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(f, 1, #ARGV[2]) == ARGV[2] then redis.call('HDEL', KEYS[1], f) end
  end
end
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`;

type Scripts = Record<string, (...args: string[]) => Promise<string | null>>;

export interface RedisMarkOptions {
  /** The marks hash; not `marks`, where earlier versions kept marks in clear (decision 111). */
  readonly hash: string;
  /** The hash of reset tombstones: field `fieldOf(provider, id or "*")`, a sealed time. */
  readonly resets: string;
  /** The fleet's pub/sub channel. */
  readonly channel: string;
  /** This broker's id in fleet messages. */
  readonly self: string;
  readonly warn: (message: string) => void;
  /** Every failure is also a health signal. */
  readonly onError: (err: Error) => void;
  /** Marks the copies as drifted apart: the state's next sync (at most a ping away) merges again. */
  readonly needSync: () => void;
}

export class RedisMarkStore implements MarkStore {
  readonly #redis: Redis;
  readonly #opts: RedisMarkOptions;
  readonly #sealed: SealedMarks;
  #pools: MarkHolder | undefined;
  /** Marks and resets on their way to Redis. */
  readonly #sending = new Set<Promise<void>>();

  constructor(redis: Redis, cipher: TokenCipher, opts: RedisMarkOptions) {
    this.#redis = redis;
    this.#opts = opts;
    this.#sealed = new SealedMarks(cipher, opts.hash, opts.channel, opts.warn);
    redis.defineCommand("kbMark", { numberOfKeys: 1, lua: MARK_SCRIPT });
    redis.defineCommand("kbReset", { numberOfKeys: 2, lua: RESET_SCRIPT });
  }

  attachPools(pools: MarkHolder): void {
    this.#pools = pools;
    pools.mirrorTo({
      mark: (provider, id, mark) => this.#track(this.#sendMark(provider, id, mark)),
      reset: (provider, id, at) => this.#track(this.#sendReset(provider, id, at)),
    });
    this.#opts.needSync();
  }

  #track(sending: Promise<void>): void {
    this.#sending.add(sending);
    void sending.finally(() => this.#sending.delete(sending));
  }

  /** Resolves once every mark and reset made so far has been sent (or failed to be). */
  async settled(): Promise<void> {
    await Promise.all(this.#sending);
  }

  /** A `mark` or `reset` message of another broker (dropped, reported once, when it does not open). */
  received(msg: FleetMessage): void {
    const m = this.#sealed.openMessage(msg.m);
    if (m?.k === "mark") this.#pools?.merge(m.provider, m.id, m.mark);
    else if (m?.k === "reset") this.#pools?.mergeReset(m.provider, m.id, m.at);
  }

  /** A message on the channel that is no fleet message at all (reported at most once a minute). */
  stray(): void {
    this.#sealed.stray();
  }

  /** Merges both ways (the connection (re)opened): this broker's marks out, the fleet's in. */
  async sync(): Promise<void> {
    const pools = this.#pools;
    if (pools === undefined) return;
    // Resets first: a mark from before one (here or in Redis) is neither pushed nor taken in.
    const resets = this.#opts.resets;
    for (const [field, text] of Object.entries(await this.#redis.hgetall(resets))) {
      const key = parseField(field);
      const at =
        key === undefined
          ? this.#sealed.badField(field, resets)
          : this.#sealed.openReset(resets, field, text);
      if (key !== undefined && at !== undefined)
        pools.mergeReset(key[0], key[1] === "*" ? undefined : key[1], at);
    }
    for (const { provider, id, mark } of pools.marks()) await this.#sendMark(provider, id, mark);
    const now = Date.now();
    // One field at a time: a bad one is skipped (and reported once), never the whole read.
    for (const [field, text] of Object.entries(await this.#redis.hgetall(this.#opts.hash))) {
      const key = parseField(field);
      const mark = key === undefined ? this.#sealed.badField(field) : this.#sealed.open(field, text);
      if (key !== undefined && mark !== undefined) pools.merge(key[0], key[1], mark, now);
    }
  }

  /**
   * Puts a mark into Redis, merged with the one there by the one rule; the mark kept is merged
   * here too (another broker's may outlast ours).
   */
  async #sendMark(provider: string, id: string, mark: SharedMark): Promise<void> {
    const field = fieldOf(provider, id);
    const scripts = this.#redis as unknown as Scripts;
    try {
      let text = await this.#redis.hget(this.#opts.hash, field);
      for (let attempt = 0; attempt < MARK_ATTEMPTS; attempt++) {
        const opened = text === null || text === "" ? undefined : this.#sealed.open(field, text);
        // One made before a reset known here is no mark any more: ours replaces it (decision 137).
        const resetAt = this.#pools?.resetAt(provider, id);
        const stale = opened !== undefined && resetAt !== undefined && (opened.markedAt ?? 0) <= resetAt;
        const held = stale ? undefined : opened;
        const now = Date.now();
        const kept = mergeMark(held, mark, now);
        if (kept === undefined) return;
        if (kept === held) {
          this.#pools?.merge(provider, id, kept, now);
          return;
        }
        const message: FleetMessage = {
          t: "mark",
          m: this.#sealed.message({ k: "mark", provider, id, mark: kept }),
          from: this.#opts.self,
        };
        const [done, there] = (await scripts.kbMark!(
          this.#opts.hash,
          field,
          text ?? "",
          this.#sealed.seal(field, kept),
          this.#opts.channel,
          JSON.stringify(message),
        )) as unknown as [number, string];
        if (done === 1) return;
        text = there;
      }
      // Others kept writing this field: the next sync pushes this broker's marks again.
      this.#opts.needSync();
    } catch (err) {
      this.#opts.onError(err as Error);
    }
  }

  /** Deletes the marks, leaves the reset's tombstone and tells the others, all with its time `at`. */
  async #sendReset(provider: string, id: string | undefined, at: number): Promise<void> {
    const field = id === undefined ? "" : fieldOf(provider, id);
    const reset: MarkMessage = { k: "reset", provider, ...(id === undefined ? {} : { id }), at };
    const message: FleetMessage = { t: "reset", m: this.#sealed.message(reset), from: this.#opts.self };
    const tombstone = fieldOf(provider, id ?? "*");
    try {
      await (this.#redis as unknown as Scripts).kbReset!(
        this.#opts.hash,
        this.#opts.resets,
        field,
        `${JSON.stringify([provider])}`.slice(0, -1) + ",",
        this.#opts.channel,
        JSON.stringify(message),
        tombstone,
        this.#sealed.sealReset(this.#opts.resets, tombstone, at),
      );
    } catch (err) {
      this.#opts.onError(err as Error);
    }
  }
}
