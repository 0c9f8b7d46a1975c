// Off loopback the admin page is served over TLS on the listener's own port (docs/spec.md §16): a
// connection whose first byte is a TLS handshake record (0x16) is answered with a leaf for the
// address it reached, from the local CA; any other first byte is the proxy protocol (CONNECT,
// plain HTTP) and goes to the listener's HTTP server untouched.
import type { Server } from "node:http";
import type { Socket } from "node:net";
import { TLSSocket } from "node:tls";
import type { LeafMinter } from "../certs/leaf.js";

const TLS_HANDSHAKE = 0x16;

/**
 * Puts a first-byte check in front of `outer`'s own connection handling. Called once, right
 * after `outer` is created, so that node's HTTP handler is the one being wrapped.
 */
export function answerTlsOnSamePort(
  outer: Server,
  tlsServer: Server,
  minter: LeafMinter,
  handshakeMs: number,
): void {
  const httpHandlers = outer.listeners("connection") as ((socket: Socket) => void)[];
  outer.removeAllListeners("connection");
  outer.on("connection", (socket: Socket) => {
    const timer = setTimeout(() => socket.destroy(), handshakeMs);
    socket.once("close", () => clearTimeout(timer));
    socket.once("data", (first: Buffer) => {
      clearTimeout(timer);
      socket.pause();
      socket.unshift(first);
      if (first[0] === TLS_HANDSHAKE) {
        const name = (socket.localAddress ?? "127.0.0.1").replace(/^::ffff:/, "");
        const tls = new TLSSocket(socket, {
          isServer: true,
          secureContext: minter.secureContext(name),
          // A name the browser sent (SNI) gets its own leaf; an address sends none.
          SNICallback: (servername, cb) => {
            try {
              cb(null, minter.secureContext(servername));
            } catch (err) {
              cb(err as Error);
            }
          },
          ALPNProtocols: ["http/1.1"],
        });
        const handshake = setTimeout(() => tls.destroy(), handshakeMs);
        tls.once("secure", () => clearTimeout(handshake));
        tls.once("close", () => clearTimeout(handshake));
        tls.on("error", () => tls.destroy());
        tlsServer.emit("connection", tls);
      } else {
        for (const handler of httpHandlers) handler.call(outer, socket);
      }
      process.nextTick(() => socket.resume());
    });
  });
}
