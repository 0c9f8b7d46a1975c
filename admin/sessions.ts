// Admin page sessions (SPEC §16): a random id in an HttpOnly, SameSite=Strict cookie, an idle
// timeout of 12 h that slides on use (the cookie keeps its value: no rotation, no expiry loop in
// the browser), a CSRF token per session, one-time login links, and a limit on failed logins per
// address. Sessions sit behind SessionStore, so the fleet work can keep them in Redis.
import { createHash, randomBytes } from "node:crypto";
import { sameToken } from "../core/same-token.js";

export const IDLE_MS = 12 * 60 * 60 * 1000;
export const LINK_MS = 10 * 60 * 1000;
export const COOKIE = "kb_admin";

export type AdminRole = "owner" | "admin";

export interface Session {
  /** sha256 of the cookie's value: a dump of the store holds no usable cookie. */
  readonly key: string;
  readonly role: AdminRole;
  /** How the session began: "link", "password", "admin token", "client <name>". */
  readonly via: string;
  readonly csrf: string;
  readonly createdAt: number;
  lastSeen: number;
  /** A message for the next page shown (the outcome of a change). */
  flash?: { kind: "ok" | "error"; text: string } | undefined;
}

/** Where sessions live. In memory for one broker; Redis (SPEC §17) implements the same calls. */
export interface SessionStore {
  get(key: string): Promise<Session | undefined>;
  put(session: Session): Promise<void>;
  delete(key: string): Promise<void>;
}

export class MemorySessionStore implements SessionStore {
  readonly #map = new Map<string, Session>();

  async get(key: string): Promise<Session | undefined> {
    return this.#map.get(key);
  }

  async put(session: Session): Promise<void> {
    this.#map.set(session.key, session);
    // Idle ones go when the store is written: no timer, and the map cannot grow without bound.
    if (this.#map.size > 64) {
      const now = Date.now();
      for (const [k, s] of this.#map) if (now - s.lastSeen > IDLE_MS) this.#map.delete(k);
    }
  }

  async delete(key: string): Promise<void> {
    this.#map.delete(key);
  }
}

function keyOf(value: string): string {
  return createHash("sha256").update(value).digest("hex");
}

export { sameToken };

export class Sessions {
  readonly #store: SessionStore;
  /** One-time login links: code hash → when it stops working. */
  readonly #links = new Map<string, number>();

  constructor(store: SessionStore = new MemorySessionStore()) {
    this.#store = store;
  }

  /** Starts a session; the returned value goes in the cookie and nowhere else. */
  async create(role: AdminRole, via: string): Promise<{ cookie: string; session: Session }> {
    const cookie = randomBytes(32).toString("base64url");
    const now = Date.now();
    const session: Session = {
      key: keyOf(cookie),
      role,
      via,
      csrf: randomBytes(24).toString("base64url"),
      createdAt: now,
      lastSeen: now,
    };
    await this.#store.put(session);
    return { cookie, session };
  }

  /** The live session of a cookie value (its idle time moved forward when `slide`); undefined when none. */
  async use(cookie: string | undefined, slide = true): Promise<Session | undefined> {
    if (cookie === undefined || cookie === "") return undefined;
    const key = keyOf(cookie);
    const session = await this.#store.get(key);
    if (session === undefined) return undefined;
    const now = Date.now();
    if (now - session.lastSeen > IDLE_MS) {
      await this.#store.delete(key);
      return undefined;
    }
    if (slide) {
      session.lastSeen = now;
      await this.#store.put(session);
    }
    return session;
  }

  save(session: Session): Promise<void> {
    return this.#store.put(session);
  }

  async end(cookie: string | undefined): Promise<Session | undefined> {
    if (cookie === undefined) return undefined;
    const key = keyOf(cookie);
    const session = await this.#store.get(key);
    await this.#store.delete(key);
    return session;
  }

  /** A code for a one-time login link (`keybroker admin`). */
  newLink(): string {
    const code = randomBytes(32).toString("base64url");
    const now = Date.now();
    for (const [k, until] of this.#links) if (until < now) this.#links.delete(k);
    this.#links.set(keyOf(code), now + LINK_MS);
    return code;
  }

  /** True once for a code that is known and not expired; the code is spent either way. */
  spendLink(code: string): boolean {
    const key = keyOf(code);
    const until = this.#links.get(key);
    this.#links.delete(key);
    return until !== undefined && until >= Date.now();
  }
}

/** Failed logins per address: `max` in a window of `windowMs`, then refused until it passes. */
export class LoginLimiter {
  readonly #fails = new Map<string, number[]>();
  readonly #max: number;
  readonly #windowMs: number;

  constructor(max = 5, windowMs = 15 * 60 * 1000) {
    this.#max = max;
    this.#windowMs = windowMs;
  }

  /** Seconds until `address` may try again (0: it may now). */
  waitSeconds(address: string): number {
    const now = Date.now();
    const recent = (this.#fails.get(address) ?? []).filter((t) => now - t < this.#windowMs);
    if (recent.length === 0) this.#fails.delete(address);
    else this.#fails.set(address, recent);
    if (recent.length < this.#max) return 0;
    return Math.ceil((recent[0]! + this.#windowMs - now) / 1000);
  }

  fail(address: string): void {
    const list = this.#fails.get(address) ?? [];
    list.push(Date.now());
    if (this.#fails.size > 10_000) this.#fails.clear();
    this.#fails.set(address, list.slice(-this.#max));
  }

  succeed(address: string): void {
    this.#fails.delete(address);
  }
}
