// Fleet mode on Redis (docs/spec.md §17). One command connection and one subscriber per broker. The
// request path never waits on Redis: marks and logins live in the broker's memory, and this
// class keeps that copy current from the `events` channel, publishes what this broker changes,
// and merges both ways whenever the connection (re)opens.
//
// Redis down or slow: commands fail fast (no offline queue, a command timeout, a bounded
// reconnect backoff), the broker serves from memory and says `degraded since …`; marks made
// meanwhile are pushed on reconnect; a Redis that came back empty (its `epoch` key is gone or
// new) gets every login this broker holds published again.
//
// Each store is its own file beside its interface (../marks/redis.ts, ../tokens/redis.ts,
// ../mcp/redis.ts, ../sessions/redis.ts, ../approvals/redis.ts); this class holds what they
// share: the connections, the keys, the cipher, the health and the merge after an outage.
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { UserError } from "../../core/errors.js";
import { RedisApprovalStore } from "../approvals/redis.js";
import { RedisMarkStore } from "../marks/redis.js";
import type { MarkHolder } from "../marks/store.js";
import { RedisMcpStore } from "../mcp/redis.js";
import { RedisSessionStore } from "../sessions/redis.js";
import type { SharedState, SharedStateOptions, StateHealth } from "../shared-state.js";
import type { StoredLogin } from "../tokens/login.js";
import { RedisTokenStore } from "../tokens/redis.js";
import { TokenCipher } from "./cipher.js";
import type { RedisConfig } from "./config.js";
import { redisErrorText } from "./errors.js";
import { type FleetMessage, fieldOf, parseField, type RedisKeys } from "./keys.js";
import { redisTls } from "./tls.js";

/** No command waits longer than this: a slow Redis counts as down. */
const COMMAND_TIMEOUT_MS = 2_000;
const CONNECT_TIMEOUT_MS = 2_000;
/** Reconnect attempts back off from 50 ms to this. */
const MAX_BACKOFF_MS = 1_000;
/** How often the connection is checked (a stalled Redis sends no `close`). */
const PING_EVERY_MS = 1_000;

function clientOptions(config: RedisConfig, password: string | undefined, onRetry: () => void) {
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
  readonly marks: RedisMarkStore;
  readonly #config: RedisConfig;
  readonly #redis: Redis;
  readonly #sub: Redis;
  readonly #keys: RedisKeys;
  readonly #self = randomUUID();
  readonly #log: SharedStateOptions["log"];
  readonly #ping: NodeJS.Timeout;
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

  private constructor(config: RedisConfig, password: string | undefined, opts: SharedStateOptions) {
    this.#config = config;
    this.#log = opts.log;
    const p = config.prefix;
    this.#keys = {
      // Not `marks`, where earlier versions kept marks in clear (decision 111).
      marks: `${p}sealed-marks`,
      resets: `${p}sealed-resets`,
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
    const cipher = new TokenCipher(opts.homeKey());
    const onError = (err: Error) => this.#failed(err);
    this.marks = new RedisMarkStore(this.#redis, cipher, {
      hash: this.#keys.marks,
      resets: this.#keys.resets,
      channel: this.#keys.channel,
      self: this.#self,
      warn: (m) => this.#log.warn(m),
      onError,
      needSync: () => {
        this.#needSync = true;
      },
    });
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
  static async open(config: RedisConfig, opts: SharedStateOptions): Promise<RedisState> {
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
    // Both connections come up together: at most CONNECT_TIMEOUT_MS in all for a Redis that is down.
    const ready = new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, CONNECT_TIMEOUT_MS);
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      if (state.#redis.status === "ready") done();
      else state.#redis.once("ready", done);
    });
    await Promise.all([state.#subscribe(), ready]);
    if (state.#redis.status === "ready") await state.#syncing;
    else state.#degrade(state.#error ?? "not reachable");
    return state;
  }

  /**
   * Subscribes to the fleet's channel, and resolves once Redis has answered the SUBSCRIBE (or
   * after CONNECT_TIMEOUT_MS, when the connection is not up yet): `open` returns a state that
   * hears the fleet's next event, rather than one whose subscription may still be on its way.
   */
  async #subscribe(): Promise<void> {
    // Subscribing before the connection is up would be refused (no offline queue).
    const go = () =>
      this.#sub.subscribe(this.#keys.channel).then(
        () => {},
        () => {},
      );
    if (this.#sub.status === "ready") return go();
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, CONNECT_TIMEOUT_MS);
      this.#sub.once("ready", () => {
        void go().then(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    });
  }

  attachPools(pools: MarkHolder): void {
    this.marks.attachPools(pools);
    this.#sync();
  }

  async settled(): Promise<void> {
    await this.#syncing;
    await this.marks.settled();
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
      this.marks.stray();
    }
  }

  #dispatch(msg: FleetMessage | null): void {
    if (typeof msg !== "object" || msg === null || msg.from === this.#self) return;
    if (msg.t === "mark" || msg.t === "reset") {
      this.marks.received(msg);
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
      this.marks.stray();
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
    await this.marks.sync();
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
