// Admin page sessions as a store holds them (docs/spec.md §16): the record and the interface of the
// stores. Implementations side by side: memory.ts (one broker, also the home's: a session is
// not written to disk), redis.ts (a fleet: every broker serves a person logged in on one). The
// cookie, the page secret and the one-time links are admin/sessions.ts's business.

/** A session ends after this long unused; each use moves it forward. */
export const IDLE_MS = 12 * 60 * 60 * 1000;

export type AdminRole = "owner" | "admin";

export interface Session {
  /** sessionKey(cookie, page secret): a dump of the store holds neither, and the cookie alone finds nothing. */
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

export interface SessionStore {
  get(key: string): Promise<Session | undefined>;
  put(session: Session): Promise<void>;
  delete(key: string): Promise<void>;
}
