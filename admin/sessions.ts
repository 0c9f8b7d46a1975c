// Admin page sessions (docs/spec.md §16): two random values, one in an HttpOnly, SameSite=Strict cookie
// and one kept by the page's script in the origin's own storage and sent as a header (decision
// 104: cookies ignore ports, so the cookie alone must find nothing). An idle timeout of 12 h
// slides on use (the values stay: no rotation, no expiry loop in the browser), a CSRF token per
// session, one-time login links. Sessions sit behind SessionStore (state/sessions/): the broker's
// memory, or a fleet's Redis.
import { createHash, randomBytes } from "node:crypto";
import { sameToken } from "../core/same-token.js";
import { type AdminRole, IDLE_MS, type Session, type SessionStore } from "../state/sessions/store.js";

export const LINK_MS = 10 * 60 * 1000;
export const COOKIE = "kb_admin";

function keyOf(value: string): string {
  return createHash("sha256").update(value).digest("hex");
}

/** Where a session is stored: the hash of both halves, so neither alone can look it up. */
export function sessionKey(cookie: string, secret: string): string {
  return keyOf(`${cookie}\n${secret}`);
}

export { sameToken };

export class Sessions {
  readonly #store: SessionStore;
  /** One-time login links: code hash → when it stops working. */
  readonly #links = new Map<string, number>();

  constructor(store: SessionStore) {
    this.#store = store;
  }

  /**
   * Starts a session: `cookie` goes in the cookie and nowhere else, `secret` to the page's script
   * once (the login answer), which keeps it in the origin's storage.
   */
  async create(role: AdminRole, via: string): Promise<{ cookie: string; secret: string; session: Session }> {
    const cookie = randomBytes(32).toString("base64url");
    const secret = randomBytes(32).toString("base64url");
    const now = Date.now();
    const session: Session = {
      key: sessionKey(cookie, secret),
      role,
      via,
      csrf: randomBytes(24).toString("base64url"),
      createdAt: now,
      lastSeen: now,
    };
    await this.#store.put(session);
    return { cookie, secret, session };
  }

  /** The live session of a cookie and page secret (its idle time moved forward when `slide`); undefined when none. */
  async use(
    cookie: string | undefined,
    secret: string | undefined,
    slide = true,
  ): Promise<Session | undefined> {
    if (cookie === undefined || cookie === "" || secret === undefined || secret === "") return undefined;
    const key = sessionKey(cookie, secret);
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

  async end(cookie: string | undefined, secret: string | undefined): Promise<Session | undefined> {
    if (cookie === undefined || secret === undefined) return undefined;
    const key = sessionKey(cookie, secret);
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

/** What LoginLimiter.begin answers: a check that may run (end it with `done`), or why not. */
export type LoginTicket =
  | { readonly ok: true; done(success: boolean): void }
  | { readonly ok: false; readonly why: "locked" | "busy" | "crowded"; readonly waitSeconds: number };

/**
 * The address failed logins are counted under: every loopback address is one (any local process
 * can bind any of 127.0.0.0/8, so counting them apart would give it millions of tries), and an
 * IPv6 address counts by its /64, which one host usually holds whole.
 */
export function limitKey(address: string): string {
  const a = address.startsWith("::ffff:") ? address.slice(7) : address;
  if (a === "::1" || a.startsWith("127.")) return "loopback";
  if (!a.includes(":")) return a;
  const [left = "", right] = a.split("%")[0]!.split("::");
  const head = left === "" ? [] : left.split(":");
  const tail = right === undefined || right === "" ? [] : right.split(":");
  const groups = [...head, ...Array(Math.max(0, 8 - head.length - tail.length)).fill("0"), ...tail];
  return `${groups
    .slice(0, 4)
    .map((g) => Number.parseInt(g, 16).toString(16))
    .join(":")}::/64`;
}

/**
 * Password checks per address (decision 105): at most `max` failures in `windowMs`, counted when
 * a check starts (so parallel guesses count) and kept unless that very check succeeds: a success
 * takes back only its own count, never the failures of others at the same address (on loopback
 * every local process shares it). One check at a time per address and `maxRunning` in all, so
 * scrypt never takes more than that many of libuv's threads from the proxy; the rest are refused
 * at once. Only passwords go through here: one-time links and tokens are never locked out.
 */
export class LoginLimiter {
  readonly #fails = new Map<string, number[]>();
  readonly #busy = new Set<string>();
  #running = 0;
  readonly #max: number;
  readonly #windowMs: number;
  readonly #maxRunning: number;

  constructor(max = 5, windowMs = 15 * 60 * 1000, maxRunning = 2) {
    this.#max = max;
    this.#windowMs = windowMs;
    this.#maxRunning = maxRunning;
  }

  /** Checks now running (for tests of the bound). */
  get running(): number {
    return this.#running;
  }

  begin(from: string): LoginTicket {
    const address = limitKey(from);
    const now = Date.now();
    const recent = (this.#fails.get(address) ?? []).filter((t) => now - t < this.#windowMs);
    if (recent.length >= this.#max) {
      this.#fails.set(address, recent);
      return { ok: false, why: "locked", waitSeconds: Math.ceil((recent[0]! + this.#windowMs - now) / 1000) };
    }
    if (this.#busy.has(address)) return { ok: false, why: "busy", waitSeconds: 1 };
    if (this.#running >= this.#maxRunning) return { ok: false, why: "crowded", waitSeconds: 1 };
    // Bounded: the oldest address makes room (a clear would hand every locked address a new start).
    if (this.#fails.size > 10_000) this.#fails.delete(this.#fails.keys().next().value!);
    recent.push(now);
    this.#fails.set(address, recent);
    this.#busy.add(address);
    this.#running++;
    let ended = false;
    return {
      ok: true,
      done: (success: boolean) => {
        if (ended) return;
        ended = true;
        this.#busy.delete(address);
        this.#running--;
        if (!success) return;
        const list = this.#fails.get(address) ?? [];
        const mine = list.indexOf(now);
        if (mine !== -1) list.splice(mine, 1);
        if (list.length === 0) this.#fails.delete(address);
      },
    };
  }
}
