// Answers for what node's HTTP server would otherwise answer itself with a bare status line
// (a parse error, a late or oversized header block, an unknown Expect, CONNECT inside a tunnel):
// every answer the broker gives has docs/spec.md §11's JSON body and `x-keybroker-error` header. Each of
// them closes the connection, and a client that never reads or closes cannot keep it open.
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { BrokerError, errorResponse } from "../../core/errors.js";
import type { ExchangeResponse } from "../exchange.js";
import { handshakeDone } from "./engine.js";

/** How long a refused client has to read the answer before its connection is cut. */
export const CLOSE_GRACE_MS = 2000;

const REASONS: Record<number, string> = {
  400: "Bad Request",
  408: "Request Timeout",
  413: "Content Too Large",
  417: "Expectation Failed",
  431: "Request Header Fields Too Large",
};

/** The whole answer as bytes for a raw socket, with `connection: close`. */
function rawAnswer(err: BrokerError, status: number, reason: string): string {
  const out = errorResponse(err);
  if (err.code === "client_unauthorized") out.headers["proxy-authenticate"] = 'Basic realm="keybroker"';
  let head = "";
  for (const [k, v] of Object.entries({ ...out.headers, connection: "close" })) head += `${k}: ${v}\r\n`;
  return `HTTP/1.1 ${status} ${reason}\r\n${head}\r\n${out.body}`;
}

/** Sockets `endAndClose` has answered: their grace timer, not a later parse error, closes them. */
const closing = new WeakSet<Duplex>();

/** Ends the socket after `data`, and destroys it if the client has not closed its side in time. */
export function endAndClose(socket: Duplex, data: string): void {
  closing.add(socket);
  const timer = setTimeout(() => socket.destroy(), CLOSE_GRACE_MS);
  timer.unref();
  socket.once("close", () => clearTimeout(timer));
  socket.end(data);
}

/** Answers `err` on a socket no HTTP response owns (CONNECT, a raw upgrade) and closes it. */
export function writeRawError(socket: Duplex, err: BrokerError, status = err.status, reason?: string): void {
  endAndClose(socket, rawAnswer(err, status, reason ?? err.code));
}

/** What node's parser reported, as the broker's error and the status that fits it. */
export function clientErrorAnswer(err: NodeJS.ErrnoException): { error: BrokerError; status: number } {
  switch (err.code) {
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return {
        error: new BrokerError("request_timeout", "the request headers did not arrive in time", {
          hint: "timeouts.headers in the rule file sets how long they may take",
        }),
        status: 408,
      };
    case "HPE_HEADER_OVERFLOW":
      return { error: new BrokerError("bad_request", "the request headers are too large"), status: 431 };
    case "HPE_CHUNK_EXTENSIONS_OVERFLOW":
      return {
        error: new BrokerError("payload_too_large", "the chunk extensions of the request body are too large"),
        status: 413,
      };
    default:
      return {
        error: new BrokerError("bad_request", `malformed HTTP request (${err.code ?? "parse error"})`),
        status: 400,
      };
  }
}

const GONE = new Set(["ECONNRESET", "EPIPE", "ERR_STREAM_DESTROYED"]);

/** Node's 'clientError': answer once, unless a response is already under way, and close. */
export function onClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  // The rest of a refused request goes on arriving, and node's parser reports each further chunk
  // as another error. Destroying the socket then lost the answer still queued in TLS (a 431
  // inside a tunnel arrived as an empty close); the answer's grace timer closes it instead.
  if (closing.has(socket) && !GONE.has(err.code ?? "")) return;
  const inFlight = (socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (!socket.writable || GONE.has(err.code ?? "") || inFlight?.headersSent || !handshakeDone(socket)) {
    socket.destroy();
    return;
  }
  const { error, status } = clientErrorAnswer(err);
  writeRawError(socket, error, status, REASONS[status]);
}

/** An `Expect` other than 100-continue: node would answer a bare 417. */
function onExpectation(req: IncomingMessage, res: ServerResponse): void {
  const err = new BrokerError(
    "bad_request",
    `"Expect: ${String(req.headers.expect).slice(0, 80)}" is not supported`,
    {
      hint: "send the request without Expect, or with Expect: 100-continue",
    },
  );
  const out = errorResponse(err);
  res.shouldKeepAlive = false;
  res.writeHead(417, { ...out.headers, connection: "close" });
  res.end(out.body);
  req.resume();
}

/** Installs the answers on a server: the listener, or the one that reads intercepted connections. */
export function answerClientErrors(
  server: Server,
  opts: { connectInside?: boolean; takeOver?: (err: NodeJS.ErrnoException, socket: Duplex) => boolean } = {},
): void {
  const takeOver = opts.takeOver;
  if (takeOver === undefined) server.on("clientError", onClientError);
  else server.on("clientError", (err, socket) => takeOver(err, socket) || onClientError(err, socket));
  server.on("checkExpectation", onExpectation);
  if (opts.connectInside) {
    // Node closes a CONNECT nobody listens for without a word.
    server.on("connect", (_req: IncomingMessage, socket: Duplex) => {
      socket.on("error", () => socket.destroy());
      writeRawError(
        socket,
        new BrokerError("bad_request", "CONNECT inside an intercepted connection is not supported"),
        400,
        REASONS[400],
      );
    });
  }
}

/** Answers `err` as docs/spec.md §11's JSON; a response already under way is cut off instead. */
export function sendError(res: ExchangeResponse, err: BrokerError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const out = errorResponse(err);
  if (err.code === "client_unauthorized") out.headers["proxy-authenticate"] = 'Basic realm="keybroker"';
  res.writeHead(out.status, out.headers);
  res.end(out.body);
}
