// HTTP/1.1 upstream (decision 188): keep-alive connections per origin, one request at a time
// on each, behind the handler interface undici's dispatch uses (as upstream-h2.ts is), in place
// of undici's Agent on the request path, whose client was the largest share of a request's
// cost. This file keeps the connections: a request takes the oldest idle one of its origin or
// opens one; idle ones are let go a second before the upstream's `Keep-Alive: timeout` (else
// 30 s). A connection's request and answer are upstream-h1-conn.ts; the wire details
// (llhttp's binding, heads) upstream-h1-wire.ts.
import type { Socket } from "node:net";
import type { buildConnector, Dispatcher } from "undici";
import { type ConnPool, H1Conn } from "./upstream-h1-conn.js";
import { H1Request } from "./upstream-h1-request.js";
import { H1_PARSER_AVAILABLE } from "./upstream-h1-wire.js";
import type { H2DispatchOptions } from "./upstream-h2.js";

export { H1_PARSER_AVAILABLE };

type Connector = buildConnector.connector;
type ConnectOptions = Parameters<Connector>[0];

/** How often idle connections are looked at for expiry, while there are any. */
const SWEEP_MS = 1_000;

/** The HTTP/1.1 connections of every origin: idle ones by origin, the oldest last. */
export class H1Pools implements ConnPool {
  readonly #idle = new Map<string, H1Conn[]>();
  readonly #all = new Set<H1Conn>();
  #sweep: NodeJS.Timeout | undefined;
  #closed = false;
  #opened = 0;

  constructor(private readonly connect: Connector) {}

  dispatch(o: H2DispatchOptions, handler: Dispatcher.DispatchHandler): void {
    const x = new H1Request(o, handler);
    handler.onRequestStart?.(x as unknown as Dispatcher.DispatchController, {});
    if (x.aborted) return;
    if (this.#closed) {
      x.fail(Object.assign(new Error("the broker is shutting down"), { code: "UND_ERR_CLOSED" }));
      return;
    }
    const list = this.#idle.get(o.origin);
    if (list !== undefined) {
      const now = performance.now();
      for (let conn = list.pop(); conn !== undefined; conn = list.pop()) {
        if (conn.dead || conn.socket.destroyed || now - conn.idleSince > conn.idleMs) {
          conn.kill();
          continue;
        }
        conn.start(x);
        return;
      }
    }
    const url = new URL(o.origin);
    this.connect(
      {
        hostname: url.hostname,
        host: url.host,
        protocol: url.protocol,
        port: url.port,
        servername: undefined,
      } as unknown as ConnectOptions,
      (err, socket) => {
        if (err !== null || socket === null) {
          x.fail(err ?? new Error(`could not connect to ${o.origin}`));
          return;
        }
        const conn = new H1Conn(this, o.origin, socket as Socket, ++this.#opened);
        this.#all.add(conn);
        if (x.aborted || this.#closed) {
          conn.kill();
          x.fail(Object.assign(new Error("the broker is shutting down"), { code: "UND_ERR_CLOSED" }));
          return;
        }
        conn.start(x);
      },
    );
  }

  /** A connection free for the next request of its origin. */
  idle(conn: H1Conn): void {
    if (this.#closed) {
      conn.kill();
      return;
    }
    conn.idleSince = performance.now();
    // Newest first, so `pop` takes the oldest, as undici's pool does: the same few carry the
    // load, a burst's extra ones idle out, and a download went faster (decision 188).
    const list = this.#idle.get(conn.origin);
    if (list === undefined) this.#idle.set(conn.origin, [conn]);
    else {
      let i = list.length;
      while (i > 0 && list[i - 1]!.id < conn.id) i--;
      if (i === list.length) list.push(conn);
      else list.splice(i, 0, conn);
    }
    if (this.#sweep === undefined) {
      this.#sweep = setInterval(this.#expire, SWEEP_MS);
      this.#sweep.unref();
    }
  }

  forget(conn: H1Conn): void {
    this.#all.delete(conn);
    const list = this.#idle.get(conn.origin);
    if (list === undefined) return;
    const i = list.indexOf(conn);
    if (i >= 0) list.splice(i, 1);
    if (list.length === 0) this.#idle.delete(conn.origin);
  }

  #expire = (): void => {
    const now = performance.now();
    for (const list of [...this.#idle.values()]) {
      for (const conn of [...list]) if (now - conn.idleSince > conn.idleMs) conn.kill();
    }
    if (this.#idle.size === 0 && this.#sweep !== undefined) {
      clearInterval(this.#sweep);
      this.#sweep = undefined;
    }
  };

  /** Closes idle connections now and the busy ones as their answers end. */
  close(): void {
    this.#closed = true;
    for (const list of [...this.#idle.values()]) for (const conn of [...list]) conn.kill();
    if (this.#sweep !== undefined) clearInterval(this.#sweep);
    this.#sweep = undefined;
  }

  destroy(): void {
    this.close();
    for (const conn of [...this.#all]) conn.kill();
  }
}
