// SPEC §3.8: at most `limits.connections` client connections are open, and at the cap the
// connections that have not yet sent a request are closed, oldest first, to admit new ones
// (decision 109). Refusing the new connection instead (node's `maxConnections`, decision 55's
// era) let a flood of idle CONNECTs lock out every client that opens a tunnel per request.
//
// A connection is "waiting" from its accept until its first request head: a plain request or
// an upgrade on the listener, the first request inside an intercepted tunnel, the first byte the
// client sends through a plain tunnel (there the broker sees no request). A CONNECT alone is not
// one: it is what an idle flood sends. A connection that has sent a request is never closed to
// make room; when every open connection has, the new one is refused as before.
import type { IncomingMessage, Server } from "node:http";
import type { Socket } from "node:net";
import type { Logger } from "../../core/log.js";
import { listenerSocket } from "./engine.js";

/** At most one log line per kind per this long, with the count since the last one. */
const LOG_EVERY_MS = 10_000;

export class ConnectionCap {
  /** Every open connection of the listener, counted until it closes or is shed. */
  readonly #open = new Set<Socket>();
  /** Connections that have not sent a request yet, oldest first (a Set keeps its order). */
  readonly #waiting = new Set<Socket>();
  readonly #log: Logger;
  #limit: number;
  #shed = 0;
  #refused = 0;
  #lastShedLog = 0;
  #lastRefusedLog = 0;

  /** Counts `outer`'s connections; `limit` is `limits.connections`. */
  constructor(outer: Server, limit: number, log: Logger) {
    this.#limit = limit;
    this.#log = log;
    outer.on("connection", (socket: Socket) => this.#admit(socket));
  }

  set limit(limit: number) {
    this.#limit = limit;
  }

  /** Connections open now, and how many of them have not sent a request. */
  get counts(): { open: number; waiting: number } {
    return { open: this.#open.size, waiting: this.#waiting.size };
  }

  /** Requests (and upgrades) read by `server` settle the connection beneath them. */
  watch(server: Server): void {
    const settle = (req: IncomingMessage) => this.settled(req.socket);
    server.on("request", settle);
    server.on("upgrade", settle);
  }

  /** The connection beneath `socket` (a listener socket, or a TLS socket on one) sent a request. */
  settled(socket: unknown): void {
    const raw = listenerSocket(socket);
    if (raw !== undefined) this.#waiting.delete(raw);
  }

  #admit(socket: Socket): void {
    this.#open.add(socket);
    socket.once("close", () => {
      this.#open.delete(socket);
      this.#waiting.delete(socket);
    });
    if (this.#open.size > this.#limit) {
      const oldest = this.#waiting.values().next();
      if (oldest.done) {
        // Every open connection is in use: the new one is refused.
        this.#open.delete(socket);
        socket.destroy();
        this.#refused++;
        this.#logRefused();
        return;
      }
      // Uncounted at once, so that a burst of new connections sheds one each.
      this.#waiting.delete(oldest.value);
      this.#open.delete(oldest.value);
      oldest.value.destroy();
      this.#shed++;
      this.#logShed();
    }
    this.#waiting.add(socket);
  }

  #logShed(): void {
    const now = Date.now();
    if (now - this.#lastShedLog < LOG_EVERY_MS) return;
    this.#lastShedLog = now;
    this.#log.warn(
      { shed: this.#shed, limit: this.#limit },
      "limits.connections are open: closing the oldest connections that have sent no request to admit new ones",
    );
    this.#shed = 0;
  }

  #logRefused(): void {
    const now = Date.now();
    if (now - this.#lastRefusedLog < LOG_EVERY_MS) return;
    this.#lastRefusedLog = now;
    this.#log.warn(
      { refused: this.#refused, limit: this.#limit },
      "refusing new connections: limits.connections are open and every one has sent a request; existing ones are still served",
    );
    this.#refused = 0;
  }
}
