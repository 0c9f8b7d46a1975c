// Which protocol each upstream origin speaks, and the dispatcher that sends a request by it
// (decisions 153 and 154). The first contact with an https origin is a probe: a connection
// offering `h2` and `http/1.1` by ALPN. What the origin chose is cached for the router's life
// (one rule set): an `h2` origin gets an HTTP/2 session (upstream-h2.ts) on that very
// connection; an `http/1.1` origin's connection is handed to the undici Agent, which asks for
// its first socket there. So the probe costs no connection of its own, and after it an origin
// costs one Map lookup per request. The intercept asks the cache which protocols to offer its
// client (listener/engine.ts), probing at the CONNECT when the origin is new.
import type { Socket } from "node:net";
import type { Dispatcher } from "undici";
import { OFFER_H1, OFFER_H2 } from "./listener/engine.js";
import {
  createUpstreamAgent,
  createUpstreamConnector,
  handoffConnector,
  type UpstreamOptions,
  UpstreamTrust,
} from "./upstream.js";
import { H1_PARSER_AVAILABLE, H1Pools } from "./upstream-h1.js";
import { type H2DispatchOptions, H2Sessions } from "./upstream-h2.js";

export type OriginProtocol = "h2" | "http/1.1";

/**
 * What an intercepted client for `host:port` is offered by ALPN (decision 153): `h2` first when
 * the origin speaks HTTP/2, else HTTP/1.1 alone; a new origin is probed first, and one that
 * cannot be reached gets HTTP/1.1 (its requests then fail as they would have).
 */
export function alpnOffer(
  router: UpstreamRouter,
  host: string,
  port: number,
): readonly string[] | Promise<readonly string[]> {
  const origin = `https://${host.includes(":") ? `[${host}]` : host}${port === 443 ? "" : `:${port}`}`;
  const known = router.protocolOf(origin);
  if (known !== undefined) return known === "h2" ? OFFER_H2 : OFFER_H1;
  // A slow origin must not eat the client's handshake time: past PROBE_WAIT_MS the client is
  // offered HTTP/1.1 (the probe goes on, and the next connection knows).
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(OFFER_H1), PROBE_WAIT_MS);
    router.probe(origin).then(
      (p) => {
        clearTimeout(timer);
        resolve(p === "h2" ? OFFER_H2 : OFFER_H1);
      },
      () => {
        clearTimeout(timer);
        resolve(OFFER_H1);
      },
    );
  });
}

type Agent = ReturnType<typeof createUpstreamAgent>;
type ConnectOptions = Parameters<ReturnType<typeof createUpstreamConnector>>[0];

/** A probed connection left unused this long is closed (the Agent then opens its own). */
const HANDOFF_MS = 10_000;
/** How long a client's TLS handshake waits for a new origin's probe. */
const PROBE_WAIT_MS = 2000;
/** Origins remembered; past this the cache starts again (a broker talks to a few dozen). */
const MAX_ORIGINS = 10_000;

export interface UpstreamDispatch {
  dispatch(opts: H2DispatchOptions, handler: Dispatcher.DispatchHandler): void;
}

export class UpstreamRouter implements UpstreamDispatch {
  readonly agent: Agent;
  readonly #connect: ReturnType<typeof createUpstreamConnector>;
  readonly #known = new Map<string, OriginProtocol>();
  readonly #probes = new Map<string, Promise<OriginProtocol>>();
  /** Probed HTTP/1.1 connections waiting for the Agent, by `hostname:port`. */
  readonly #handoff = new Map<string, Socket>();
  readonly #h2 = new H2Sessions();
  /**
   * The request path's HTTP/1.1 (decision 188); undefined, and undici's Agent instead, with
   * KEYBROKER_UPSTREAM_H1=undici or on a node without the parser it needs.
   */
  readonly #h1: H1Pools | undefined;

  constructor(options: UpstreamOptions) {
    // The system roots read once for the three connectors below.
    const opts = { ...options, trust: options.trust ?? new UpstreamTrust(options.upstreamCa) };
    const take = (hostname: string, port: number) => this.#take(`${hostname}:${port}`);
    this.agent = createUpstreamAgent(opts, take);
    this.#connect = createUpstreamConnector(opts, true);
    this.#h1 =
      process.env.KEYBROKER_UPSTREAM_H1 === "undici" || !H1_PARSER_AVAILABLE
        ? undefined
        : new H1Pools(handoffConnector(opts, take));
  }

  /** What `origin` (`https://host[:port]`) speaks, when it is known. */
  protocolOf(origin: string): OriginProtocol | undefined {
    return this.#known.get(origin);
  }

  /** Learns what `origin` speaks by connecting to it; one probe at a time per origin. */
  probe(origin: string): Promise<OriginProtocol> {
    const known = this.#known.get(origin);
    if (known !== undefined) return Promise.resolve(known);
    let pending = this.#probes.get(origin);
    if (pending === undefined) {
      pending = this.#open(origin).finally(() => this.#probes.delete(origin));
      this.#probes.set(origin, pending);
    }
    return pending;
  }

  dispatch(opts: H2DispatchOptions, handler: Dispatcher.DispatchHandler): void {
    const origin = opts.origin;
    const known = origin.charCodeAt(4) === 58 /* "http:" */ ? "http/1.1" : this.#known.get(origin);
    if (known === "http/1.1") {
      if (this.#h1 !== undefined) this.#h1.dispatch(opts, handler);
      else this.agent.dispatch(opts as Dispatcher.DispatchOptions, handler);
      return;
    }
    if (known === "h2") {
      const session = this.#h2.get(origin);
      if (session !== undefined && "waiting" in session) {
        void session.waiting.then(() => this.dispatch(opts, handler));
        return;
      }
      if (session !== undefined) {
        this.#h2.request(session, opts, handler);
        return;
      }
      // No session takes a stream (gone after GOAWAY or idle, or all at the origin's limit):
      // open another, learning again what the origin speaks.
      this.#known.delete(origin);
    }
    this.probe(origin).then(
      () => this.dispatch(opts, handler),
      (err: Error) => handler.onResponseError?.(undefined as unknown as Dispatcher.DispatchController, err),
    );
  }

  #open(origin: string): Promise<OriginProtocol> {
    const url = new URL(origin);
    const hostname = url.hostname;
    const port = url.port === "" ? 443 : Number(url.port);
    return new Promise((resolve, reject) => {
      this.#connect(
        { hostname, host: url.host, protocol: "https:", port: String(port) } as ConnectOptions,
        (err, socket) => {
          if (err !== null || socket === null) {
            reject(err ?? new Error(`could not connect to ${origin}`));
            return;
          }
          const proto: OriginProtocol =
            (socket as { alpnProtocol?: unknown }).alpnProtocol === "h2" ? "h2" : "http/1.1";
          if (this.#known.size >= MAX_ORIGINS) this.#known.clear();
          this.#known.set(origin, proto);
          if (proto === "h2") this.#h2.adopt(origin, socket as Socket);
          else this.#park(`${hostname}:${port}`, socket as Socket);
          resolve(proto);
        },
      );
    });
  }

  /** Keeps a probed HTTP/1.1 connection for the Agent's first connect to its origin. */
  #park(key: string, socket: Socket): void {
    const prior = this.#handoff.get(key);
    if (prior !== undefined) {
      socket.destroy();
      return;
    }
    this.#handoff.set(key, socket);
    const drop = () => {
      if (this.#handoff.get(key) === socket) this.#handoff.delete(key);
    };
    socket.setTimeout(HANDOFF_MS, () => {
      drop();
      socket.destroy();
    });
    socket.once("close", drop);
    socket.on("error", () => socket.destroy());
  }

  #take(key: string): Socket | undefined {
    const socket = this.#handoff.get(key);
    if (socket === undefined) return undefined;
    this.#handoff.delete(key);
    socket.setTimeout(0);
    if (socket.destroyed) return undefined;
    return socket;
  }

  async close(): Promise<void> {
    this.#h1?.close();
    this.#h2.close();
    for (const s of this.#handoff.values()) s.destroy();
    this.#handoff.clear();
    await this.agent.close();
  }

  async destroy(): Promise<void> {
    this.#h1?.destroy();
    this.#h2.destroy();
    for (const s of this.#handoff.values()) s.destroy();
    this.#handoff.clear();
    await this.agent.destroy();
  }
}
