// Sessions in this broker's memory: the store of a broker that shares none (the home's, too).
import { IDLE_MS, type Session, type SessionStore } from "./store.js";

/** Past this many sessions, idle ones are dropped when a new one is written. */
const SWEEP_ABOVE = 64;

export class MemorySessionStore implements SessionStore {
  readonly #map = new Map<string, Session>();

  async get(key: string): Promise<Session | undefined> {
    return this.#map.get(key);
  }

  async put(session: Session): Promise<void> {
    this.#map.set(session.key, session);
    // Idle ones go when the store is written: no timer, and the map cannot grow without bound.
    if (this.#map.size > SWEEP_ABOVE) {
      const now = Date.now();
      for (const [k, s] of this.#map) if (now - s.lastSeen > IDLE_MS) this.#map.delete(k);
    }
  }

  async delete(key: string): Promise<void> {
    this.#map.delete(key);
  }
}
