// Reverse mode's HTTP/2 with prior knowledge (h2c) on the loopback listener. The listener's
// HTTP/1.1 parser meets the preface ("PRI * HTTP/2.0") and stops with HPE_PAUSED_H2_UPGRADE;
// only then is the connection taken from it and handed, preface first, to the HTTP/2 server.
// HTTP/1.1 connections pay nothing for it: no byte is looked at before node's parser.
import type { Http2Server } from "node:http2";
import type { Socket } from "node:net";
import { Duplex, PassThrough } from "node:stream";
import { serveH2 } from "./engine.js";

/** The events node's HTTP server listens to on a connection's socket. */
const HTTP_EVENTS = ["data", "end", "drain", "timeout", "error", "close", "resume", "pause"] as const;

/**
 * Takes a connection whose first request was the HTTP/2 preface away from the HTTP/1.1 server.
 * False (the caller answers as for any parse error) when it is not one, or node's server does
 * not look as expected.
 */
export function takeOverH2c(
  err: NodeJS.ErrnoException & { rawPacket?: Buffer },
  socket: Socket,
  h2: Http2Server,
): boolean {
  if (err.code !== "HPE_PAUSED_H2_UPGRADE" || !Buffer.isBuffer(err.rawPacket)) return false;
  const parser = (socket as unknown as { parser?: { unconsume?: () => void } }).parser;
  if (typeof parser?.unconsume !== "function") return false;
  parser.unconsume();
  for (const event of HTTP_EVENTS) socket.removeAllListeners(event);
  socket.setTimeout(0);
  // What node's parser had read goes first, then the rest as it comes, in order.
  const input = new PassThrough();
  input.write(err.rawPacket);
  socket.on("data", (chunk: Buffer) => {
    if (!input.write(chunk)) socket.pause();
  });
  input.on("drain", () => socket.resume());
  socket.on("end", () => input.end());
  const stream = Duplex.from({ readable: input, writable: socket });
  socket.on("error", () => stream.destroy());
  socket.on("close", () => stream.destroy());
  stream.on("error", () => socket.destroy());
  stream.on("close", () => socket.destroy());
  serveH2(h2, stream as unknown as Socket, socket);
  socket.resume();
  return true;
}
