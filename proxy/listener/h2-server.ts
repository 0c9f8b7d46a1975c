// The HTTP/2 server behind the intercept (and reverse mode's h2c): it never listens; connections
// that negotiated `h2` are handed to it, and each stream goes to the pipeline as an exchange
// (h2-exchange.ts). Its limits are HTTP/1.1's in HTTP/2's terms (docs/spec.md §3.8, decision 157):
//   - streams open at once per connection (`MAX_STREAMS`), the header list's size and count
//     (an HPACK bomb decodes into a refused stream, not memory), the session's memory;
//   - a connection with no open stream is closed after the keep-alive timeout, as an idle
//     HTTP/1.1 one is; a stream waiting on its upstream is not idle;
//   - node's own guards against rapid reset, CONTINUATION and SETTINGS floods and invalid
//     frames close the offending session only.

import type { IncomingHttpHeaders } from "node:http2";
import { createServer, type Http2Server, type Http2Session, type ServerHttp2Stream } from "node:http2";

/** Streams one client connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS). */
export const MAX_STREAMS = 100;
/** The decoded header list a stream may send (HTTP/1.1's parser allows 16 KiB of head). */
export const MAX_HEADER_LIST = 16 * 1024;

export type OnStream = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, raw: string[]) => void;

export interface H2ServerOptions {
  /** How long a connection without open streams may stay (timeouts.keep_alive). */
  idleMs(): number;
  /** A session's first stream: the connection is in use (limits.connections). */
  onFirstStream(session: Http2Session): void;
}

export function createH2Server(opts: H2ServerOptions, onStream: OnStream): Http2Server {
  const server = createServer({
    settings: {
      maxConcurrentStreams: MAX_STREAMS,
      maxHeaderListSize: MAX_HEADER_LIST,
      enablePush: false,
    },
    maxHeaderListPairs: 256,
    // MiB of outbound frames and header state per session before it is refused new streams.
    maxSessionMemory: 4,
    maxSessionInvalidFrames: 100,
    maxSessionRejectedStreams: 100,
  });
  server.on("session", (session: Http2Session) => {
    let open = 0;
    let first = true;
    session.on("error", () => session.destroy());
    session.setTimeout(opts.idleMs(), () => {
      if (open === 0) session.close();
    });
    session.on("stream", (stream: ServerHttp2Stream) => {
      open++;
      if (first) {
        first = false;
        opts.onFirstStream(session);
      }
      stream.once("close", () => open--);
    });
  });
  server.on(
    "stream",
    (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, _flags: number, raw: string[]) => {
      stream.on("error", () => {});
      onStream(stream, headers, raw);
    },
  );
  return server;
}
