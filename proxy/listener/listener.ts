// The listener: one loopback port that takes CONNECT (intercepted or tunnelled), plain-HTTP
// proxy requests, reverse-mode `/p/<provider>` requests, the admin page and API, /metrics and
// its own health endpoint; the inner server parses what comes out of intercepted TLS. It owns
// the sockets, their limits and the answers to malformed requests; every request bound upstream
// goes to `handle` (the pipeline) with its target.
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Http2Server, IncomingHttpHeaders, ServerHttp2Stream } from "node:http2";
import type { AddressInfo, Socket } from "node:net";
import { ADMIN_PREFIX } from "../../admin/api.js";
import { type AdminPage, isAdminPagePath } from "../../admin/page.js";
import { sendRootPage, wantsHtml } from "../../admin/root-page.js";
import { answerTlsOnSamePort } from "../../admin/tls.js";
import type { AuditEntry } from "../../audit/audit-log.js";
import type { LeafMinter } from "../../certs/leaf.js";
import { BrokerError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import { http } from "../../core/node-http.js";
import { releaseHeap } from "../../core/v8-tuning.js";
import { VERSION } from "../../core/version.js";
import type { BrokerMetrics } from "../../metrics/broker-metrics.js";
import { isMetricsRequest, type MetricsEndpoint } from "../../metrics/endpoint.js";
import { isLoopbackHost } from "../../rules/address.js";
import type { Rules } from "../../rules/types.js";
import type { ExchangeResponse } from "../exchange.js";
import type { Launches } from "../launches.js";
import type { Runtime } from "../runtime.js";
import type { Upgrade } from "../websocket.js";
import { answerClientErrors, sendError } from "./client-errors.js";
import { asBrokerError, onConnect } from "./connect.js";
import { ConnectionCap } from "./connection-cap.js";
import {
  applyConnectionRules,
  connectionLimit,
  releaseAfterSurges,
  serverOptions,
  trackConnections,
} from "./connection-limits.js";
import {
  type ConnectInfo,
  connectInfo as connectInfoOf,
  type InnerServers,
  sessionSocket,
} from "./engine.js";
import { H1_SERVER_AVAILABLE, H1Server } from "./h1-server.js";
import { H2Response } from "./h2-exchange.js";
import { createH2Server } from "./h2-server.js";
import { takeOverH2c } from "./h2c.js";
import { assertLocalCaller } from "./local-caller.js";
import { interceptedTarget, outerTarget, type Target, type TargetRequest } from "./request-target.js";

export const HEALTH_PATH = "/__keybroker/health";

/** Runs one HTTP/2 stream through the pipeline (listener/h2-exchange.ts). */
export type HandleStream = (
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  raw: string[],
  t: Target,
) => Promise<void>;

/** Runs one request through the pipeline (proxy/pipeline.ts). */
export type Handle = (
  req: IncomingMessage,
  res: ExchangeResponse,
  t: Target,
  upgrade?: Upgrade,
) => Promise<void>;

export interface ListenerParts {
  /** The rules the listener starts with: its server options and whether it is on loopback. */
  readonly rules: Rules;
  /** The current runtime (it changes on reload). */
  readonly runtime: () => Runtime;
  /** `run --isolate` launches: clients of their own (decision 114). */
  readonly launches: Launches;
  readonly log: Logger;
  readonly minter: LeafMinter;
  /** The CA's SHA-256 fingerprint, in the health answer: which home's broker this is. */
  readonly caFingerprint: string;
  readonly metrics: BrokerMetrics;
  readonly audit: (entry: AuditEntry) => void;
  readonly adminPage: AdminPage;
  readonly metricsEndpoint: MetricsEndpoint;
  /** The admin API, under ADMIN_PREFIX. */
  readonly admin: (req: IncomingMessage, res: ServerResponse) => void;
  readonly handle: Handle;
  readonly handleStream: HandleStream;
  /** The ALPN protocols to offer a client intercepted for this origin (decision 153). */
  readonly alpn: (info: ConnectInfo) => readonly string[] | Promise<readonly string[]>;
}

export class Listener {
  readonly #p: ListenerParts;
  readonly #outer: Server;
  readonly #inner: Server;
  /**
   * Reads intercepted HTTP/1.1 connections, handing to `#inner` what it does not serve
   * (decision 189); undefined with KEYBROKER_SERVER_H1=node or on a node without its parser.
   */
  readonly #h1: H1Server | undefined;
  /** HTTP/2 connections: intercepted ones that negotiated h2, and h2c in reverse mode. */
  readonly #h2: Http2Server;
  readonly #sockets = new Set<Socket>();
  /** limits.connections: at the cap, the oldest connection that has sent no request makes room. */
  readonly #cap: ConnectionCap;
  /** Off loopback: the admin page over TLS on the listener's port (admin/tls.ts). */
  readonly #adminTls: Server | undefined;

  constructor(p: ListenerParts) {
    this.#p = p;
    const { rules } = p;
    const options = serverOptions(rules);
    this.#outer = http.createServer(options, (req, res) => this.#onOuterRequest(req, res));
    if (!isLoopbackHost(rules.listen.host)) {
      this.#adminTls = http.createServer(options, (req, res) => this.#onAdminTlsRequest(req, res));
      answerClientErrors(this.#adminTls);
      answerTlsOnSamePort(this.#outer, this.#adminTls, p.minter, rules.timeouts.handshakeMs);
    }
    this.#inner = http.createServer(options, (req, res) => this.#onInterceptedRequest(req, res));
    this.#cap = new ConnectionCap(this.#outer, connectionLimit(rules), p.log);
    this.#h2 = createH2Server(
      {
        idleMs: () => p.runtime().rules.timeouts.keepAliveMs,
        onFirstStream: (session) => this.#cap.settled(sessionSocket(session)),
      },
      (stream, headers, raw) => this.#onStream(stream, headers, raw),
    );
    this.#h1 =
      H1_SERVER_AVAILABLE && process.env.KEYBROKER_SERVER_H1 !== "node"
        ? new H1Server({
            fallback: this.#inner,
            headersMs: () => p.runtime().rules.timeouts.headersMs,
            keepAliveMs: () => p.runtime().rules.timeouts.keepAliveMs,
            onRequest: (req, res) => {
              this.#cap.request(req.socket, res);
              this.#onInterceptedRequest(req, res);
            },
          })
        : undefined;
    const h1 = this.#h1;
    const inner: InnerServers = {
      http:
        h1 === undefined ? (socket) => this.#inner.emit("connection", socket) : (socket) => h1.serve(socket),
      h2: this.#h2,
      alpn: p.alpn,
    };
    this.#cap.watch(this.#outer);
    this.#cap.watch(this.#inner);
    applyConnectionRules(this.#outer, this.#inner, rules, this.#cap);
    trackConnections(this.#inner);
    releaseAfterSurges(this.#outer, releaseHeap);
    const connect = {
      get rt() {
        return p.runtime();
      },
      launches: p.launches,
      log: p.log,
      minter: p.minter,
      inner,
      cap: this.#cap,
      metrics: p.metrics,
      audit: p.audit,
    };
    this.#outer.on("connect", (req: IncomingMessage, socket: Socket, head: Buffer) =>
      onConnect(connect, req, socket, head),
    );
    // Reverse mode's h2c, on loopback only (decision 158).
    answerClientErrors(
      this.#outer,
      isLoopbackHost(rules.listen.host)
        ? { takeOver: (err, socket) => takeOverH2c(err, socket as Socket, this.#h2) }
        : {},
    );
    answerClientErrors(this.#inner, { connectInside: true });
    this.#inner.on("upgrade", (req: IncomingMessage, socket: Socket, head: Buffer) =>
      this.#onUpgrade(req, socket, head, true),
    );
    this.#outer.on("upgrade", (req: IncomingMessage, socket: Socket, head: Buffer) =>
      this.#onUpgrade(req, socket, head, false),
    );
    this.#outer.on("connection", (socket: Socket) => {
      socket.setNoDelay(true);
      this.#sockets.add(socket);
      socket.on("close", () => this.#sockets.delete(socket));
    });
  }

  /** Serves a connection accepted elsewhere: an isolated launch's listener (decision 115). */
  acceptConnection(socket: Socket): void {
    this.#outer.emit("connection", socket);
  }

  async listen(port: number, host: string): Promise<AddressInfo> {
    await new Promise<void>((resolve, reject) => {
      this.#outer.once("error", reject);
      this.#outer.listen(port, host, () => {
        this.#outer.off("error", reject);
        resolve();
      });
    });
    return this.#outer.address() as AddressInfo;
  }

  /** A new rule set's timeouts and connection limits. */
  applyRules(rules: Rules): void {
    applyConnectionRules(this.#outer, this.#inner, rules, this.#cap);
  }

  /** Stops listening and drops every connection; resolves when the listener has closed. */
  close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.#outer.close(() => resolve()));
    this.#inner.close();
    this.#h1?.close();
    this.#h2.close();
    this.#adminTls?.close();
    this.#outer.closeAllConnections();
    for (const socket of this.#sockets) socket.destroy();
    return closed;
  }

  #onInterceptedRequest(req: IncomingMessage, res: ExchangeResponse): void {
    try {
      void this.#p.handle(req, res, interceptedTarget(this.#p.runtime(), this.#p.launches, req));
    } catch (err) {
      sendError(res, asBrokerError(err, this.#p.log));
    }
  }

  /** An HTTP/2 stream: its head names the target as an HTTP/1.1 request line and Host would. */
  #onStream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, raw: string[]): void {
    const p = this.#p;
    try {
      const socket = sessionSocket(stream.session);
      const method = headers[":method"];
      const path = headers[":path"];
      if (socket === undefined || method === "CONNECT" || path === undefined) {
        throw new BrokerError(
          "bad_request",
          `an HTTP/2 ${String(method)} without a path is not supported here`,
          {
            hint: "send requests with a :path; CONNECT inside an intercepted connection is not supported",
          },
        );
      }
      const authority = headers[":authority"] ?? headers.host;
      const head = { socket, url: path, headers: { host: authority }, httpVersion: "2.0" };
      const rt = p.runtime();
      const target = connectInfoOf(socket)
        ? interceptedTarget(rt, p.launches, head as unknown as TargetRequest)
        : outerTarget(rt, p.launches, { ...head, headers } as unknown as TargetRequest, p.log);
      void p.handleStream(stream, headers, raw, target);
    } catch (err) {
      sendError(new H2Response(stream), asBrokerError(err, p.log));
    }
  }

  #onOuterRequest(req: IncomingMessage, res: ServerResponse): void {
    const url = req.url ?? "/";
    const p = this.#p;
    try {
      // The admin page checks its callers itself: sessions, CSRF tokens, the Host it is named by.
      if (isAdminPagePath(url)) {
        void p.adminPage.handle(req, res);
        return;
      }
      const rt = p.runtime();
      if (isMetricsRequest(url)) {
        void p.metricsEndpoint.handle(req, res, () => assertLocalCaller(req, rt.rules.listen.host));
        return;
      }
      if (url === "/" && (req.method === "GET" || req.method === "HEAD") && !rt.providerForMount("/")) {
        this.#onRoot(req, res, rt.rules.listen.host);
        return;
      }
      if (url.startsWith("/")) assertLocalCaller(req, rt.rules.listen.host);
      if (url.startsWith(ADMIN_PREFIX)) {
        p.admin(req, res);
        return;
      }
      if (url === HEALTH_PATH) {
        const body = JSON.stringify({ ok: true, version: VERSION, pid: process.pid, ca: p.caFingerprint });
        res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
        res.end(body);
        return;
      }
      void p.handle(req, res, outerTarget(rt, p.launches, req, p.log));
    } catch (err) {
      sendError(res, asBrokerError(err, p.log));
    }
  }

  /**
   * `GET /`. Off loopback, a person there comes for the admin page: 303 to it (decision 106).
   * On loopback a browser gets a page that says what this is; a program gets an error that says
   * what to use instead (decision 142).
   */
  #onRoot(req: IncomingMessage, res: ServerResponse, listen: string): void {
    if (!isLoopbackHost(listen)) {
      res.writeHead(303, { location: "/admin/" });
      res.end();
      return;
    }
    if (wantsHtml(req)) {
      sendRootPage(req, res);
      return;
    }
    assertLocalCaller(req, listen);
    throw new BrokerError("bad_request", "nothing is served at /: this port is keybroker's proxy", {
      hint: 'set the agent\'s proxy variables with eval "$(keybroker env)" or start it with keybroker run -- COMMAND; the admin page is at /admin/ (keybroker admin prints a login link)',
    });
  }

  /** A request that came over TLS straight to the listener: only the admin page is served there. */
  #onAdminTlsRequest(req: IncomingMessage, res: ServerResponse): void {
    const url = req.url ?? "/";
    if (isAdminPagePath(url)) {
      void this.#p.adminPage.handle(req, res);
      return;
    }
    if (url === "/") {
      res.writeHead(303, { location: "/admin/" });
      res.end();
      return;
    }
    sendError(
      res,
      new BrokerError("bad_request", "over TLS this port serves only the admin page at /admin/", {
        hint: "use it as a proxy over plain HTTP (HTTPS_PROXY=http://...)",
      }),
    );
  }

  #onUpgrade(req: IncomingMessage, socket: Socket, head: Buffer, intercepted: boolean): void {
    socket.on("error", () => socket.destroy());
    // A response bound to the raw socket, so refusals go out as ordinary error responses.
    const res = new http.ServerResponse(req);
    res.assignSocket(socket);
    res.shouldKeepAlive = false;
    // A refusal says `Connection: close`; no server hook closes a response made by hand.
    res.once("finish", () => socket.end());
    const p = this.#p;
    try {
      const rt = p.runtime();
      if (!intercepted && (req.url ?? "/").startsWith("/")) assertLocalCaller(req, rt.rules.listen.host);
      const target = intercepted
        ? interceptedTarget(rt, p.launches, req)
        : outerTarget(rt, p.launches, req, p.log);
      void p.handle(req, res, target, { socket, head, res });
    } catch (err) {
      sendError(res, asBrokerError(err, p.log));
    }
  }
}
