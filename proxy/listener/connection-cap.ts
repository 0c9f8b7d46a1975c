// docs/spec.md §3.8: at most `limits.connections` client connections are open, and at the cap the
// idlest connection is closed to admit a new one (decisions 109, 138). Refusing the new
// connection instead (node's `maxConnections`, decision 55's era) let a flood of idle CONNECTs
// lock out every client that opens a tunnel per request.
//
// A connection is "waiting" from its accept until its first request head: a plain request or
// an upgrade on the listener, the first request inside an intercepted tunnel, the first byte the
// client sends through a plain tunnel (there the broker sees no request). A CONNECT alone is not
// one: it is what an idle flood sends. A connection whose requests have all been answered is
// "idle" from the end of its last one; one cheap request per connection now and then no longer
// keeps a flood from being shed (decision 138). At the cap the oldest waiting connection is
// closed, else the one idle the longest; a connection with a request in flight (or an upgrade,
// or a plain tunnel, where the broker cannot see a request end) never is: when every open one
// is busy, the new one is refused as before. Both queues are lists in order of entry, linked
// through each connection's entry (O(1) per event, and no hashing or table resizing on the
// request path): a connection leaves the idle one when a request starts and re-enters at its end.
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { Logger } from "../../core/log.js";
import { listenerSocket } from "./engine.js";

/** At most one log line per kind per this long, with the count since the last one. */
const LOG_EVERY_MS = 10_000;

/** A connection's place in the cap's books, from its accept until it closes or is shed. */
interface Entry {
  readonly socket: Socket;
  /** Requests in flight; Infinity for a connection in use for good (a tunnel, an upgrade). */
  busy: number;
  /** The queue it is in: waiting until its first request, idle between requests, else none. */
  queue: Queue | undefined;
  prev: Entry | undefined;
  next: Entry | undefined;
}

/** Entries in order of entry, linked through the entries themselves. */
class Queue {
  head: Entry | undefined;
  tail: Entry | undefined;
  size = 0;

  push(e: Entry): void {
    e.queue = this;
    e.prev = this.tail;
    e.next = undefined;
    if (this.tail === undefined) this.head = e;
    else this.tail.next = e;
    this.tail = e;
    this.size++;
  }

  remove(e: Entry): void {
    if (e.queue !== this) return;
    if (e.prev === undefined) this.head = e.next;
    else e.prev.next = e.next;
    if (e.next === undefined) this.tail = e.prev;
    else e.next.prev = e.prev;
    e.queue = undefined;
    e.prev = undefined;
    e.next = undefined;
    this.size--;
  }
}

export class ConnectionCap {
  /** Every open connection of the listener, counted until it closes or is shed. */
  readonly #open = new Map<Socket, Entry>();
  /** Connections that have not sent a request yet, oldest first. */
  readonly #waiting = new Queue();
  /** Connections whose requests have all been answered, idle the longest first. */
  readonly #idle = new Queue();
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

  /**
   * A request read by `server` makes the connection beneath it busy until its response ends;
   * an upgrade, for as long as it is open.
   */
  watch(server: Server): void {
    server.on("request", (req: IncomingMessage, res: ServerResponse) => this.request(req.socket, res));
    server.on("upgrade", (req: IncomingMessage) => this.settled(req.socket));
  }

  /** A request read from `socket`: its connection is busy until `res` closes. */
  request(socket: unknown, res: { on(event: "close", listener: () => void): unknown }): void {
    const e = this.#begin(socket, 1);
    // `on`, not `once` (a wrapper object and a bound function a request): a response closes once,
    // and #end ignores a connection already idle.
    if (e !== undefined) res.on("close", () => this.#end(e));
  }

  /** The connection beneath `socket` (a listener socket, or a TLS socket on one) is in use until it closes. */
  settled(socket: unknown): void {
    this.#begin(socket, Number.POSITIVE_INFINITY);
  }

  #begin(socket: unknown, requests: number): Entry | undefined {
    const raw = listenerSocket(socket);
    const e = raw === undefined ? undefined : this.#open.get(raw);
    if (e === undefined) return undefined;
    e.queue?.remove(e);
    e.busy += requests;
    return e;
  }

  /** A response on `e`'s connection ended: with none left in flight, it is the newest idle connection. */
  #end(e: Entry): void {
    // Closed or shed meanwhile: it is in no book any more.
    if (this.#open.get(e.socket) !== e || e.queue !== undefined) return;
    e.busy--;
    if (e.busy <= 0) {
      e.busy = 0;
      this.#idle.push(e);
    }
  }

  #admit(socket: Socket): void {
    const e: Entry = { socket, busy: 0, queue: undefined, prev: undefined, next: undefined };
    this.#open.set(socket, e);
    socket.on("close", () => this.#forget(e));
    if (this.#open.size > this.#limit) {
      const idlest = this.#waiting.head ?? this.#idle.head;
      if (idlest === undefined) {
        // Every open connection has a request in flight: the new one is refused.
        this.#open.delete(socket);
        socket.destroy();
        this.#refused++;
        this.#logRefused();
        return;
      }
      // Uncounted at once, so that a burst of new connections sheds one each.
      this.#forget(idlest);
      idlest.socket.destroy();
      this.#shed++;
      this.#logShed();
    }
    this.#waiting.push(e);
  }

  #forget(e: Entry): void {
    if (this.#open.get(e.socket) === e) this.#open.delete(e.socket);
    e.queue?.remove(e);
  }

  #logShed(): void {
    const now = Date.now();
    if (now - this.#lastShedLog < LOG_EVERY_MS) return;
    this.#lastShedLog = now;
    this.#log.warn(
      { shed: this.#shed, limit: this.#limit },
      "limits.connections are open: closing the connections idle the longest (those that have sent no request first) to admit new ones",
    );
    this.#shed = 0;
  }

  #logRefused(): void {
    const now = Date.now();
    if (now - this.#lastRefusedLog < LOG_EVERY_MS) return;
    this.#lastRefusedLog = now;
    this.#log.warn(
      { refused: this.#refused, limit: this.#limit },
      "refusing new connections: limits.connections are open and every one has a request in flight; existing ones are still served",
    );
    this.#refused = 0;
  }
}
