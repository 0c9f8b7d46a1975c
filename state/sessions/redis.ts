// Admin page sessions in a fleet's Redis (docs/spec.md §16, §17), so a person logged in on one broker is
// logged in on all of them. One string key per session, `<prefix>session:<sha256 of the cookie>`,
// whose Redis expiry is the session's idle deadline: every use writes it again and so slides it.
// The value is the whole session sealed with the fleet's TokenCipher (bound to the key name): a
// Redis dump holds no cookie, no CSRF token and nothing readable, and whoever can write to Redis
// but has no home key cannot make a session (an owner's) up.
//
// Redis down: the sessions this broker has used are kept in memory and served from there while
// the fleet state is degraded, so a person signed in here keeps working; what was written
// meanwhile (a new session, a logout) is pushed once Redis answers. A logout is also published,
// so every broker drops its copy at once. A Redis that restarted empty has lost its sessions:
// people log in again (copies are not published back, which could revive a session ended
// elsewhere during the outage).
import type { Redis } from "ioredis";
import type { TokenCipher } from "../redis/cipher.js";
import type { FleetMessage } from "../redis/keys.js";
import { type AdminRole, IDLE_MS, type Session, type SessionStore } from "./store.js";

/** Copies kept for an outage: idle ones are dropped when a new one comes past this count. */
const KEEP_LOCAL = 64;

export interface RedisSessionOptions {
  readonly prefix: string;
  /** The fleet's pub/sub channel: a logout is announced there. */
  readonly channel: string;
  /** This broker's id in fleet messages. */
  readonly self: string;
  /** True while the fleet state is degraded: sessions are then served from memory at once. */
  readonly degraded: () => boolean;
  /** Every failure is also a health signal. */
  readonly onError: (err: Error) => void;
}

export class RedisSessionStore implements SessionStore {
  readonly #redis: Redis;
  readonly #cipher: TokenCipher;
  readonly #opts: RedisSessionOptions;
  /** The sessions used on this broker, by key. */
  readonly #local = new Map<string, Session>();
  /** Written here while Redis did not answer: a session to store, or undefined for a logout. */
  readonly #unsent = new Map<string, Session | undefined>();

  constructor(redis: Redis, cipher: TokenCipher, opts: RedisSessionOptions) {
    this.#redis = redis;
    this.#cipher = cipher;
    this.#opts = opts;
  }

  #name(key: string): string {
    return `${this.#opts.prefix}session:${key}`;
  }

  async get(key: string): Promise<Session | undefined> {
    if (!this.#opts.degraded()) {
      try {
        await this.flush();
        const sealed = await this.#redis.get(this.#name(key));
        const session = sealed === null ? undefined : this.#open(key, sealed);
        if (session === undefined) this.#local.delete(key);
        else this.#keep(session);
        return session;
      } catch (err) {
        this.#opts.onError(err as Error);
      }
    }
    return this.#local.get(key);
  }

  async put(session: Session): Promise<void> {
    this.#keep(session);
    this.#unsent.set(session.key, session);
    await this.#send(session.key);
  }

  async delete(key: string): Promise<void> {
    this.#local.delete(key);
    this.#unsent.set(key, undefined);
    await this.#send(key);
  }

  /** Pushes what was written while Redis did not answer; throws when it still does not. */
  async flush(): Promise<void> {
    for (const key of [...this.#unsent.keys()]) await this.#write(key);
  }

  /** Another broker ended a session: this copy goes too. */
  forget(key: string): void {
    this.#local.delete(key);
    this.#unsent.delete(key);
  }

  async #send(key: string): Promise<void> {
    if (this.#opts.degraded()) return;
    try {
      await this.#write(key);
    } catch (err) {
      this.#opts.onError(err as Error);
    }
  }

  async #write(key: string): Promise<void> {
    if (!this.#unsent.has(key)) return;
    const session = this.#unsent.get(key);
    const left = session === undefined ? 0 : session.lastSeen + IDLE_MS - Date.now();
    if (session !== undefined && left > 0) {
      await this.#redis.set(this.#name(key), this.#seal(session), "PX", left);
    } else {
      const message: FleetMessage = { t: "session", f: key, from: this.#opts.self };
      await this.#redis
        .multi()
        .del(this.#name(key))
        .publish(this.#opts.channel, JSON.stringify(message))
        .exec();
    }
    // Written again meanwhile: that newer write is still to go.
    if (this.#unsent.get(key) === session) this.#unsent.delete(key);
  }

  #keep(session: Session): void {
    this.#local.set(session.key, session);
    if (this.#local.size <= KEEP_LOCAL) return;
    const now = Date.now();
    for (const [k, s] of this.#local) if (now - s.lastSeen > IDLE_MS) this.#local.delete(k);
  }

  #seal(s: Session): string {
    const fields: Omit<Session, "key"> = {
      role: s.role,
      via: s.via,
      csrf: s.csrf,
      createdAt: s.createdAt,
      lastSeen: s.lastSeen,
      ...(s.flash === undefined ? {} : { flash: s.flash }),
    };
    return this.#cipher.seal(JSON.stringify(fields), this.#name(s.key));
  }

  /** The session, or undefined for a value sealed with another home key, for another key, or malformed. */
  #open(key: string, sealed: string): Session | undefined {
    const text = this.#cipher.open(sealed, this.#name(key));
    if (text === undefined) return undefined;
    try {
      const v = JSON.parse(text) as Record<string, unknown>;
      const role = v.role as AdminRole;
      if (
        (role !== "owner" && role !== "admin") ||
        typeof v.via !== "string" ||
        typeof v.csrf !== "string" ||
        typeof v.createdAt !== "number" ||
        typeof v.lastSeen !== "number"
      )
        return undefined;
      const flash = v.flash as Session["flash"];
      return {
        key,
        role,
        via: v.via,
        csrf: v.csrf,
        createdAt: v.createdAt,
        lastSeen: v.lastSeen,
        ...(flash === undefined ? {} : { flash }),
      };
    } catch {
      return undefined;
    }
  }
}
