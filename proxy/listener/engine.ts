// The interception engine: turns a CONNECT socket into decrypted HTTP requests on an internal
// http.Server (TLS terminated in-process with node:tls, no extra hop), or tunnels it untouched.
// This is the only module that knows how TLS is terminated; docs/decisions.md says why it is
// node:tls and not http-mitm-proxy.
import type { Http2Server, Http2Session } from "node:http2";
import { connect as netConnect, type Socket } from "node:net";
import { Duplex } from "node:stream";
import { TLSSocket } from "node:tls";
import type { LeafMinter } from "../../certs/leaf.js";
import { withoutReadAhead } from "../upstream-h1-wire.js";

/** What the CONNECT said, attached to the TLS socket for the requests that follow on it. */
export interface ConnectInfo {
  readonly host: string;
  readonly port: number;
  /** The client that authenticated the CONNECT. */
  readonly client: string;
  /** The `run --isolate` launch that authenticated it, if one did (proxy/launches.ts). */
  readonly launch?: string | undefined;
}

const INFO = Symbol("keybroker.connect");

export function connectInfo(socket: unknown): ConnectInfo | undefined {
  return (socket as { [INFO]?: ConnectInfo })[INFO];
}

export const CONNECT_OK = "HTTP/1.1 200 Connection Established\r\n\r\n";

/** ALPN offers: HTTP/1.1 alone, or HTTP/2 first for an origin that speaks it (decision 153). */
export const OFFER_H1: readonly string[] = ["http/1.1"];
export const OFFER_H2: readonly string[] = ["h2", "http/1.1"];

/** The servers decrypted connections are handed to, and what to offer whom. */
export interface InnerServers {
  /** Serves a connection that speaks HTTP/1.1 (listener/h1-server.ts, or node's server). */
  readonly http: (socket: Socket) => void;
  /** Serves connections that negotiated `h2`. */
  readonly h2: Http2Server;
  /** The ALPN protocols to offer for this CONNECT's origin; a promise while it is probed. */
  alpn(info: ConnectInfo): readonly string[] | Promise<readonly string[]>;
}

/** The socket beneath each HTTP/2 session: node hands out only a proxy of what it was given. */
const SOCKETS = new WeakMap<Http2Session, Socket>();

/** The listener's (or the TLS) socket an HTTP/2 session runs on. */
export function sessionSocket(session: Http2Session | undefined): Socket | undefined {
  return session === undefined ? undefined : SOCKETS.get(session);
}

/** Hands a connection that speaks HTTP/2 to `h2`; `raw` is the socket beneath it, when it is a wrapper. */
export function serveH2(h2: Http2Server, socket: Socket, raw: Socket = socket): void {
  // The server makes the session while the connection is handed over.
  h2.once("session", (session: Http2Session) => SOCKETS.set(session, raw));
  h2.emit("connection", socket);
}

const SECURE = Symbol("keybroker.secure");
const LISTENER_SOCKET = Symbol("keybroker.listenerSocket");

/**
 * The listener's socket beneath `socket`: itself for a plain socket, the CONNECT's socket for an
 * intercepted TLS socket; undefined for any other TLS socket.
 */
export function listenerSocket(socket: unknown): Socket | undefined {
  if (socket instanceof TLSSocket)
    return (socket as unknown as { [LISTENER_SOCKET]?: Socket })[LISTENER_SOCKET];
  return socket as Socket;
}

/** False for an intercepted connection whose TLS handshake has not finished: nothing can be answered on it. */
export function handshakeDone(socket: unknown): boolean {
  return !(socket instanceof TLSSocket) || (socket as unknown as { [SECURE]?: boolean })[SECURE] === true;
}

/**
 * Answers the CONNECT, terminates the client's TLS with a leaf for `info.host`, and hands the
 * decrypted connection to `inner` as if it had accepted it. A client that has not finished the
 * handshake within `handshakeMs` (no ClientHello, a stalled handshake) is cut off; `inner`'s
 * own timeouts apply as well (headers, idle keep-alive).
 *
 * The TLS socket is made when the client's first byte arrives, not with the 200 (decision 55):
 * OpenSSL sets up a server connection's record and handshake buffers (about 38 KiB) the first
 * time it is read, and a TLS socket is read at its client's EOF too, so thousands of idle
 * CONNECTs closing at once made it allocate and free 115 MiB in one burst, which glibc kept.
 * Until then the connection is a plain socket whose end or timeout just closes it.
 */
export function intercept(
  socket: Socket,
  head: Buffer,
  info: ConnectInfo,
  minter: LeafMinter,
  inner: InnerServers,
  handshakeMs: number,
): void {
  socket.write(CONNECT_OK);
  // One timer from the 200 to the end of the handshake; it closes whichever socket is on top.
  let top: Socket | TLSSocket = socket;
  const timer = setTimeout(() => top.destroy(), handshakeMs);
  socket.on("close", () => clearTimeout(timer));
  const begin = (offer: readonly string[]) => {
    if (socket.destroyed) return;
    top = terminate(socket, head, info, minter, inner, offer);
    top.once("secure", () => clearTimeout(timer));
  };
  // An origin seen for the first time is probed before the client's hello is answered.
  const start = () => {
    const offer = inner.alpn(info);
    if (Array.isArray(offer)) begin(offer);
    else void (offer as Promise<readonly string[]>).then(begin);
  };
  if (head.length > 0) {
    start();
    return;
  }
  // 'readable' with nothing to read is the client's end: the socket is just closed (the
  // listener allows half-open sockets, so it would otherwise wait for the timeout).
  socket.once("readable", () => {
    if (socket.destroyed) return;
    if (socket.readableLength === 0) socket.destroy();
    else start();
  });
}

/** The TLS half of `intercept`, once the client has sent something. */
function terminate(
  socket: Socket,
  head: Buffer,
  info: ConnectInfo,
  minter: LeafMinter,
  inner: InnerServers,
  offer: readonly string[],
): TLSSocket {
  let transport: Socket | Duplex = socket;
  if (head.length > 0) {
    // Bytes the client sent before our 200: replay them in front of the socket's own.
    socket.unshift(head);
    transport = Duplex.from({ readable: socket, writable: socket });
  }
  // Bytes already buffered in `socket` are passed on by node when the TLS socket starts reading.
  const tls = new TLSSocket(transport as Socket, {
    isServer: true,
    secureContext: minter.secureContext(info.host),
    ALPNProtocols: offer as string[],
  });
  (tls as unknown as { [INFO]: ConnectInfo })[INFO] = info;
  (tls as unknown as { [LISTENER_SOCKET]: Socket })[LISTENER_SOCKET] = socket;
  tls.on("error", () => tls.destroy());
  tls.once("secure", () => {
    (tls as unknown as { [SECURE]: boolean })[SECURE] = true;
  });
  tls.on("close", () => socket.destroy());
  if (offer === OFFER_H1) {
    // Handed over at once: the HTTP server's reading is what notices a client that goes away
    // during the handshake. Its headers timeout runs from here too.
    inner.http(tls);
    return tls;
  }
  // Which server reads it depends on what the handshake chose. The TLS socket reads (and so
  // sees a client go away) by itself meanwhile; the handshake timer bounds the wait.
  tls.once("secure", () => {
    // A server-side TLS socket made by hand keeps `secureConnecting` set (only tls.Server
    // clears it), and an HTTP/2 session waits for that to clear before it reads a byte.
    (tls as unknown as { secureConnecting: boolean }).secureConnecting = false;
    if (tls.alpnProtocol === "h2") serveH2(inner.h2, tls as unknown as Socket);
    else inner.http(tls);
  });
  return tls;
}

/**
 * Pipes the client socket to `target` untouched (hosts without a rule). `onConnectError` answers
 * the CONNECT when the target cannot be reached; `onConnected` runs once it is reached. A tunnel
 * with no byte in either direction for `idleMs` is closed: every byte the target sends is
 * written to the client socket, so that socket's own idle timer sees both directions.
 */
export function tunnel(
  socket: Socket,
  head: Buffer,
  target: { host: string; port: number },
  idleMs: number,
  onConnectError: (err: Error) => void,
  onConnected?: () => void,
): void {
  const upstream = netConnect({ host: target.host, port: target.port });
  upstream.setNoDelay(true);
  // Each piped chunk would otherwise cost a read-ahead turn on each socket (decision 201).
  withoutReadAhead(socket);
  withoutReadAhead(upstream);
  socket.setTimeout(idleMs, () => socket.destroy());
  let connected = false;
  upstream.once("connect", () => {
    connected = true;
    socket.write(CONNECT_OK);
    onConnected?.();
    if (head.length > 0) upstream.write(head);
    socket.pipe(upstream);
    upstream.pipe(socket);
  });
  upstream.on("error", (err) => {
    if (connected) socket.destroy();
    else onConnectError(err);
  });
  socket.on("error", () => upstream.destroy());
  socket.on("close", () => upstream.destroy());
  upstream.on("close", () => socket.destroy());
}
