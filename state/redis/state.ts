// Fleet mode on Redis (SPEC §17). One command connection and one subscriber per broker. The
// request path never waits on Redis: marks and logins live in the broker's memory, and this
// class keeps that copy current from the `events` channel, publishes what this broker changes,
// and merges both ways whenever the connection (re)opens.
//
// Redis down or slow: commands fail fast (no offline queue, a command timeout, a bounded
// reconnect backoff), the broker serves from memory and says `degraded since …`; marks made
// meanwhile are pushed on reconnect; a Redis that came back empty (its `epoch` key is gone or
// new) gets every login this broker holds published again.
//
// Marks are sealed (redis-marks.ts, decision 111), so the server cannot compare deadlines: the
// broker reads the field, merges by the one rule (marks.ts `mergeMark`) and writes the result
// only if the field still holds what it read (a compare-and-set script), else reads again. A
// value that does not open is no mark: skipped, reported once, and overwritten by the next one.
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { UserError } from "../../core/errors.js";
import type { RedisStateConfig } from "../../rules/types.js";
import type { PoolState } from "../../secrets/pool.js";
import { RedisApprovalStore } from "../approvals/redis.js";
import { mergeMark, type SharedMark } from "../marks/merge.js";
import { type MarkMessage, SealedMarks } from "../marks/sealed.js";
import { RedisMcpStore } from "../mcp/redis.js";
import { RedisSessionStore } from "../sessions/redis.js";
import type { SharedState, SharedStateOptions, StateHealth } from "../shared-state.js";
import type { StoredLogin } from "../tokens/login.js";
import { RedisTokenStore } from "../tokens/redis.js";
import { TokenCipher } from "./cipher.js";
import { type FleetMessage, fieldOf, parseField, type RedisKeys } from "./keys.js";
import { redisErrorText, redisTls } from "./tls.js";

/** No command waits longer than this: a slow Redis counts as down. */
const COMMAND_TIMEOUT_MS = 2_000;
const CONNECT_TIMEOUT_MS = 2_000;
/** Reconnect attempts back off from 50 ms to this. */
const MAX_BACKOFF_MS = 1_000;
/** How often the connection is checked (a stalled Redis sends no `close`). */
const PING_EVERY_MS = 1_000;
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

/** Clears one mark (ARGV[1] a field) or a provider's (ARGV[2] a field prefix), then publishes. */
const RESET_SCRIPT = `
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

function clientOptions(config: RedisStateConfig, password: string | undefined, onRetry: () => void) {
  return {
    ...(password === undefined ? {} : { password }),
    ...redisTls(config),
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: COMMAND_TIMEOUT_MS,
    connectTimeout: CONNECT_TIMEOUT_MS,
    retryStrategy: (times: number) => {
      onRetry();
      return Math.min(50 * 2 ** Math.min(times, 5), MAX_BACKOFF_MS);
    },
  };
}

export class RedisState implements SharedState {
  readonly tokens: RedisTokenStore;
  readonly mcp: RedisMcpStore;
  readonly sessions: RedisSessionStore;
  readonly approvals: RedisApprovalStore;
  readonly #config: RedisStateConfig;
  readonly #redis: Redis;
  readonly #sub: Redis;
  readonly #keys: RedisKeys;
  readonly #self = randomUUID();
  readonly #log: SharedStateOptions["log"];
  readonly #ping: NodeJS.Timeout;
  #pools: PoolState | undefined;
  #held: () => readonly StoredLogin[] = () => [];
  #degradedSince: Date | undefined;
  #error: string | undefined;
  /** The epoch seen last: another one (or none) means Redis lost its data. */
  #epoch: string | undefined;
  #syncing: Promise<void> | undefined;
  #syncAgain = false;
  /** Set whenever the copies may have drifted apart: at start, after an outage, on a new subscriber. */
  #needSync = true;
  #closed = false;
  /** Marks and resets on their way to Redis. */
  readonly #sending = new Set<Promise<void>>();
  readonly #marks: SealedMarks;

  private constructor(config: RedisStateConfig, password: string | undefined, opts: SharedStateOptions) {
    this.#config = config;
    this.#log = opts.log;
    const p = config.prefix;
    this.#keys = {
      // Not `marks`, where earlier versions kept marks in clear (decision 111).
      marks: `${p}sealed-marks`,
      logins: `${p}logins`,
      epoch: `${p}epoch`,
      channel: `${p}events`,
      lock: (provider, id) => `${p}lock:${fieldOf(provider, id)}`,
    };
    const onRetry = () => this.#degrade("connection lost", true);
    this.#redis = new Redis(config.url, clientOptions(config, password, onRetry));
    this.#sub = new Redis(config.url, clientOptions(config, password, onRetry));
    for (const c of [this.#redis, this.#sub]) {
      c.on("error", (err: Error) => this.#degrade(redisErrorText(err)));
      c.on("close", () => this.#degrade("connection closed", true));
    }
    this.#sub.on("message", (_channel: string, text: string) => this.#onMessage(text));
    this.#sub.on("ready", () => {
      this.#needSync = true;
      this.#sync();
    });
    this.#redis.on("ready", () => this.#sync());
    this.#redis.defineCommand("kbMark", { numberOfKeys: 1, lua: MARK_SCRIPT });
    this.#redis.defineCommand("kbReset", { numberOfKeys: 1, lua: RESET_SCRIPT });
    const cipher = new TokenCipher(opts.homeKey());
    this.#marks = new SealedMarks(cipher, this.#keys.marks, this.#keys.channel, (m) => this.#log.warn(m));
    const onError = (err: Error) => this.#failed(err);
    this.tokens = new RedisTokenStore(this.#redis, this.#keys, cipher, { self: this.#self, onError });
    this.mcp = new RedisMcpStore(this.#redis, config.prefix, cipher, { onError });
    this.approvals = new RedisApprovalStore(this.#redis, cipher, {
      prefix: p,
      channel: this.#keys.channel,
      self: this.#self,
      onError,
    });
    this.sessions = new RedisSessionStore(this.#redis, cipher, {
      prefix: p,
      channel: this.#keys.channel,
      self: this.#self,
      degraded: () => this.#degradedSince !== undefined,
      onError,
    });
    this.#ping = setInterval(() => {
      this.#redis.ping().then(
        () => this.#sync(),
        (err: Error) => this.#failed(err),
      );
    }, PING_EVERY_MS);
    this.#ping.unref();
  }

  /** Connects (waiting at most the connect timeout: a broker starts degraded rather than not at all). */
  static async open(config: RedisStateConfig, opts: SharedStateOptions): Promise<RedisState> {
    const password = config.password === undefined ? undefined : await opts.resolve(config.password);
    if (config.password !== undefined && password === undefined) {
      throw new UserError(
        `state.password: ${config.password} has no value, so the broker cannot log in to the fleet's Redis: ${
          config.password.startsWith("env:")
            ? `set ${config.password.slice(4)} in the broker's environment`
            : "give the credential reference a value"
        }, or change state.password in the rule file (keybroker check says where it is looked up)`,
      );
    }
    const state = new RedisState(config, password, opts);
    await state.#subscribe();
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, CONNECT_TIMEOUT_MS);
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      if (state.#redis.status === "ready") done();
      else state.#redis.once("ready", done);
    });
    if (state.#redis.status === "ready") await state.#syncing;
    else state.#degrade(state.#error ?? "not reachable");
    return state;
  }

  async #subscribe(): Promise<void> {
    // Subscribing before the connection is up would be refused (no offline queue).
    const go = () => this.#sub.subscribe(this.#keys.channel).catch(() => {});
    if (this.#sub.status === "ready") await go();
    else this.#sub.once("ready", () => void go());
  }

  attachPools(pools: PoolState): void {
    this.#pools = pools;
    pools.mirrorTo({
      mark: (provider, id, mark) => this.#track(this.#sendMark(provider, id, mark)),
      reset: (provider, id) => this.#track(this.#sendReset(provider, id)),
    });
    this.#needSync = true;
    this.#sync();
  }

  #track(sending: Promise<void>): void {
    this.#sending.add(sending);
    void sending.finally(() => this.#sending.delete(sending));
  }

  async settled(): Promise<void> {
    await this.#syncing;
    await Promise.all(this.#sending);
  }

  attachLogins(held: () => readonly StoredLogin[]): void {
    this.#held = held;
  }

  health(): StateHealth {
    return {
      store: "redis",
      url: this.#config.url,
      prefix: this.#config.prefix,
      ...(this.#degradedSince === undefined
        ? {}
        : {
            degradedSince: this.#degradedSince.toISOString(),
            ...(this.#error ? { error: this.#error } : {}),
          }),
    };
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#ping);
    await this.approvals.close();
    await this.#syncing?.catch(() => {});
    this.#redis.disconnect();
    this.#sub.disconnect();
  }

  /**
   * Enters the degraded state: one warning, until the store answers again. A `generic` reason
   * (the connection closed) does not hide the specific one seen before it (a refused certificate).
   */
  #degrade(reason: string, generic = false): void {
    if (this.#closed) return;
    if (!generic || this.#error === undefined) this.#error = reason;
    this.#needSync = true;
    if (this.#degradedSince !== undefined) return;
    this.#degradedSince = new Date();
    this.#log.warn(
      `fleet state: Redis at ${this.#config.url} is unreachable (${reason}); serving from memory, refreshing no OAuth login until it is back`,
    );
  }

  /**
   * A command failed. While the connection is down that says only "not connected": the
   * connection's own error (a refused certificate, a refused connection) stays the reason shown.
   */
  #failed(err: Error): void {
    this.#degrade(redisErrorText(err), this.#redis.status !== "ready");
  }

  #recovered(): void {
    if (this.#degradedSince === undefined) return;
    const seconds = Math.round((Date.now() - this.#degradedSince.getTime()) / 1000);
    this.#degradedSince = undefined;
    this.#error = undefined;
    this.#log.warn(
      `fleet state: Redis at ${this.#config.url} is reachable again after ${seconds}s; marks and logins merged`,
    );
  }

  /** Runs inside the subscriber's event: whatever a message holds, it never throws out of here. */
  #onMessage(text: string): void {
    try {
      this.#dispatch(JSON.parse(text) as FleetMessage | null);
    } catch {
      // Not a message of this fleet (not JSON, not an object, a field of the wrong shape): dropped.
      this.#marks.stray();
    }
  }

  #dispatch(msg: FleetMessage | null): void {
    if (typeof msg !== "object" || msg === null || msg.from === this.#self) return;
    if (msg.t === "mark" || msg.t === "reset") {
      const m = this.#marks.openMessage(msg.m);
      if (m?.k === "mark") this.#pools?.merge(m.provider, m.id, m.mark);
      else if (m?.k === "reset") this.#pools?.mergeReset(m.provider, m.id);
    } else if (msg.t === "login" && msg.f !== undefined) {
      const key = parseField(msg.f);
      if (key !== undefined) {
        this.mcp.follow(key[0], key[1]);
        this.tokens.changed(key[0], key[1]);
      }
    } else if (msg.t === "session" && msg.f !== undefined) {
      this.sessions.forget(msg.f);
    } else if (msg.t === "approval" && msg.m !== undefined) {
      this.approvals.received(msg.m);
    } else {
      this.#marks.stray();
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
      let text = await this.#redis.hget(this.#keys.marks, field);
      for (let attempt = 0; attempt < MARK_ATTEMPTS; attempt++) {
        const held = text === null || text === "" ? undefined : this.#marks.open(field, text);
        const now = Date.now();
        const kept = mergeMark(held, mark, now);
        if (kept === undefined) return;
        if (kept === held) {
          this.#pools?.merge(provider, id, kept, now);
          return;
        }
        const message: FleetMessage = {
          t: "mark",
          m: this.#marks.message({ k: "mark", provider, id, mark: kept }),
          from: this.#self,
        };
        const [done, there] = (await scripts.kbMark!(
          this.#keys.marks,
          field,
          text ?? "",
          this.#marks.seal(field, kept),
          this.#keys.channel,
          JSON.stringify(message),
        )) as unknown as [number, string];
        if (done === 1) return;
        text = there;
      }
      // Others kept writing this field: the next sync pushes this broker's marks again.
      this.#needSync = true;
    } catch (err) {
      this.#failed(err as Error);
    }
  }

  async #sendReset(provider: string, id: string | undefined): Promise<void> {
    const field = id === undefined ? "" : fieldOf(provider, id);
    const reset: MarkMessage = { k: "reset", provider, ...(id === undefined ? {} : { id }) };
    const message: FleetMessage = { t: "reset", m: this.#marks.message(reset), from: this.#self };
    try {
      await (this.#redis as unknown as Scripts).kbReset!(
        this.#keys.marks,
        field,
        `${JSON.stringify([provider])}`.slice(0, -1) + ",",
        this.#keys.channel,
        JSON.stringify(message),
      );
    } catch (err) {
      this.#failed(err as Error);
    }
  }

  /** Merges both ways once the connection is (again) up; runs once more if asked meanwhile. */
  #sync(): void {
    if (this.#closed || this.#redis.status !== "ready") return;
    if (this.#syncing !== undefined) {
      this.#syncAgain = true;
      return;
    }
    if (!this.#needSync) return;
    this.#needSync = false;
    this.#syncing = this.#mergeAll()
      .then(
        () => this.#recovered(),
        (err: Error) => this.#failed(err),
      )
      .finally(() => {
        this.#syncing = undefined;
        if (this.#syncAgain) {
          this.#syncAgain = false;
          this.#sync();
        }
      });
  }

  async #mergeAll(): Promise<void> {
    const r = this.#redis;
    // The epoch tells a Redis that kept its data from one that restarted empty.
    await r.set(this.#keys.epoch, randomUUID(), "NX");
    const epoch = (await r.get(this.#keys.epoch)) ?? undefined;
    const lostData = this.#epoch !== undefined && epoch !== this.#epoch;
    this.#epoch = epoch;
    const pools = this.#pools;
    if (pools !== undefined) {
      for (const { provider, id, mark } of pools.marks()) await this.#sendMark(provider, id, mark);
      const now = Date.now();
      // One field at a time: a bad one is skipped (and reported once), never the whole read.
      for (const [field, text] of Object.entries(await r.hgetall(this.#keys.marks))) {
        const key = parseField(field);
        const mark = key === undefined ? this.#marks.badField(field) : this.#marks.open(field, text);
        if (key !== undefined && mark !== undefined) pools.merge(key[0], key[1], mark, now);
      }
    }
    await this.sessions.flush();
    if (lostData) {
      // An MCP login's binding first: no broker should see a login it cannot refresh.
      await this.mcp.republish(this.#held());
      for (const login of this.#held()) await this.tokens.republish(login);
    }
    await this.mcp.pull();
    await this.approvals.resync(lostData);
    for (const field of await r.hkeys(this.#keys.logins)) {
      const key = parseField(field);
      if (key !== undefined) this.tokens.changed(key[0], key[1]);
    }
  }
}

type Scripts = Record<string, (...args: string[]) => Promise<string | null>>;
