// The response on its way to the client. For a request that carried a real credential, every
// echo of it in the headers and the body is replaced by the client's placeholder (docs/spec.md §3.3):
//   - a small body with a known length is scrubbed whole and sent with its new length (one write);
//   - anything else streams through the scrubber, which holds back at most one pattern's length;
//     a larger body of known length keeps it (replacements fitted to the replaced length), one
//     of unknown length goes out chunked;
//   - a compressed body is decompressed first (gzip, deflate, br, also layered) and sent
//     uncompressed; a coding keybroker cannot undo is refused with 502, never passed unread.
// Without a credential the response passes through untouched.
import type { IncomingHttpHeaders } from "node:http";
import { BrokerError } from "../core/errors.js";
import { contentCodings, decoderChain, decodeWhole } from "./content-coding.js";
import type { ExchangeResponse } from "./exchange.js";
import { forwardableResponseHeaders } from "./headers.js";
import { ResponseScrubber, type ScrubPatterns, scrubHeaders, scrubText } from "./scrub-stream.js";

/** Bodies up to this size (with a Content-Length) are scrubbed in one piece. */
const WHOLE_LIMIT = 64 * 1024;

/**
 * The content codings of a response in the order they must be undone (the last applied
 * first), `identity` left out. Throws when one cannot be undone (zstd, compress, …): a body
 * keybroker cannot read cannot be checked for an echo of the credential, so it is not passed on.
 */
export function codingsToUndo(header: string | string[] | undefined, patterns?: ScrubPatterns): string[] {
  const { codings, unknown } = contentCodings(header);
  if (unknown !== undefined) {
    throw new BrokerError(
      "upstream_unreachable",
      // The coding is upstream text: quoted scrubbed, like everything else it sends.
      `the upstream answered with content-encoding "${scrubText(patterns, String(header))}", which keybroker cannot decode to check it for an echo of the credential; the answer was not passed on`,
      { hint: "keybroker asks for identity encoding; report it to the provider, or retry" },
    );
  }
  return codings;
}

/**
 * gRPC compresses message by message (`grpc-encoding`), where no echo can be found: refused like
 * a content coding keybroker cannot undo. The h2 exchange asks for identity (h2-exchange.ts).
 */
function refuseCompressedGrpc(header: string | string[] | undefined, patterns: ScrubPatterns): void {
  if (header === undefined || header === "identity") return;
  throw new BrokerError(
    "upstream_unreachable",
    `the upstream answered with grpc-encoding "${scrubText(patterns, String(header))}", which keybroker cannot check for an echo of the credential; the answer was not passed on`,
    { hint: "the client's call should not ask for compressed answers (grpc-accept-encoding: identity)" },
  );
}

export interface BodySink {
  /** Writes a chunk; false asks the caller to pause until `onceDrain` fires. */
  write(chunk: Buffer): boolean;
  onceDrain(resume: () => void): void;
  /** Ends the body; `done` runs when everything has been handed to the socket. */
  end(done: () => void): void;
}

/** What `startResponse` writes a streamed body with. */
interface BodyWriter {
  write(chunk: Buffer): boolean;
  /** Before `end`: node frames the last chunk and writes the terminator and trailers itself. */
  release(): void;
}

/**
 * Writes a streamed body. node's HTTP/1.1 response frames each chunk of a chunked body as four
 * writes (size line, CRLF, data, CRLF) that its socket then gathers; one framed buffer instead
 * is about a tenth fewer instructions for a stream of small SSE events. node reads
 * `chunkedEncoding` at every write, and the head it wrote already says chunked; where the flag
 * is missing or false, node frames as before (docs/decisions.md, decision 185).
 */
function bodyWriter(res: ExchangeResponse): BodyWriter {
  const node = res as ExchangeResponse & { chunkedEncoding?: boolean };
  if (node.chunkedEncoding !== true) return { write: (chunk) => res.write(chunk), release: () => {} };
  node.chunkedEncoding = false;
  return {
    write: (chunk) => (chunk.length === 0 ? true : res.write(frameChunk(chunk))),
    release: () => {
      node.chunkedEncoding = true;
    },
  };
}

const HEX_DIGITS = Buffer.from("0123456789abcdef", "latin1");

/**
 * One chunk of a chunked body (RFC 9112 §7.1): size in hex, CRLF, the bytes, CRLF. Written
 * byte by byte and with `set`: `Buffer#write` and `Buffer#copy` are calls into node that cost
 * more than the whole frame for an SSE event of a few hundred bytes.
 */
export function frameChunk(chunk: Buffer): Buffer {
  const size = chunk.length;
  let digits = 1;
  while (digits < 8 && size >>> (4 * digits) !== 0) digits++;
  const framed = Buffer.allocUnsafe(digits + size + 4);
  for (let i = digits - 1, v = size; i >= 0; i--, v >>>= 4) framed[i] = HEX_DIGITS[v & 15]!;
  framed[digits] = 0x0d;
  framed[digits + 1] = 0x0a;
  framed.set(chunk, digits + 2);
  framed[digits + 2 + size] = 0x0d;
  framed[digits + 3 + size] = 0x0a;
  return framed;
}

/** Writes the response head and returns where its body goes. */
export function startResponse(
  res: ExchangeResponse,
  status: number,
  statusMessage: string,
  upstreamHeaders: IncomingHttpHeaders,
  patterns: ScrubPatterns | undefined,
): BodySink {
  if (patterns === undefined || !patterns.active) {
    res.writeHead(status, statusMessage, forwardableResponseHeaders(upstreamHeaders));
    // An event stream's head goes out at once; other heads ride with the first body bytes.
    if (String(upstreamHeaders["content-type"] ?? "").startsWith("text/event-stream")) res.flushHeaders();
    const writer = bodyWriter(res);
    return {
      write: writer.write,
      onceDrain: (resume) => res.once("drain", resume),
      end: (done) => {
        writer.release();
        res.end();
        res.on("finish", done);
      },
    };
  }

  const codings = codingsToUndo(upstreamHeaders["content-encoding"], patterns);
  refuseCompressedGrpc(upstreamHeaders["grpc-encoding"], patterns);
  const headers = forwardableResponseHeaders(scrubHeaders(patterns, upstreamHeaders));
  // The reason phrase is upstream text too (`400 Bad key Bearer sk-…`).
  const reason = patterns.scrubText(statusMessage);
  const inflate = decoderChain(codings);
  const length = Number(upstreamHeaders["content-length"]);
  if (inflate === undefined && Number.isFinite(length) && length <= WHOLE_LIMIT) {
    const chunks: Buffer[] = [];
    return {
      write: (chunk) => {
        chunks.push(chunk);
        return true;
      },
      onceDrain: (resume) => resume(),
      end: (done) => {
        // Most such bodies arrive in one chunk: scrubbed as it is, not copied first.
        const body = patterns.scrubBuffer(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
        headers["content-length"] = String(body.length);
        res.writeHead(status, reason, headers);
        res.end(body);
        res.on("finish", done);
      },
    };
  }

  // A large body of known length keeps it: replacements are fitted to what they replace (the
  // placeholder cut or padded with `*`), so no chunked re-encoding is needed. So does a gRPC
  // stream, whose messages carry their own length in a prefix: an echo replaced in place
  // leaves every prefix true (decision 156). Otherwise the length may change, and the body
  // goes out chunked.
  const keepLength =
    inflate === undefined &&
    (Number.isFinite(length) || String(upstreamHeaders["content-type"] ?? "").startsWith("application/grpc"));
  if (!keepLength) delete headers["content-length"];
  if (inflate !== undefined) delete headers["content-encoding"];
  res.writeHead(status, reason, headers);
  if (String(upstreamHeaders["content-type"] ?? "").startsWith("text/event-stream")) res.flushHeaders();
  const scrubber = new ResponseScrubber(keepLength ? patterns.sameLength() : patterns);
  const writer = bodyWriter(res);
  const emit = (chunk: Buffer): boolean => {
    const out = scrubber.push(chunk);
    return out.length === 0 ? true : writer.write(out);
  };
  if (inflate === undefined) {
    return {
      write: emit,
      onceDrain: (resume) => res.once("drain", resume),
      end: (done) => {
        const tail = scrubber.end();
        writer.release();
        res.end(tail.length > 0 ? tail : undefined);
        res.on("finish", done);
      },
    };
  }
  const { head, tail: out } = inflate;
  out.on("data", (chunk: Buffer) => {
    if (!emit(chunk)) {
      out.pause();
      res.once("drain", () => out.resume());
    }
  });
  out.on("error", () => res.destroy());
  if (head !== out) head.on("error", () => res.destroy());
  return {
    write: (chunk) => head.write(chunk),
    onceDrain: (resume) => head.once("drain", resume),
    end: (done) => {
      out.once("end", () => {
        const tail = scrubber.end();
        writer.release();
        res.end(tail.length > 0 ? tail : undefined);
        res.on("finish", done);
      });
      head.end();
    },
  };
}

/** Sends a response that was held back whole (an error answer), scrubbed. */
export function sendWhole(
  res: ExchangeResponse,
  status: number,
  statusMessage: string,
  upstreamHeaders: IncomingHttpHeaders,
  body: Buffer,
  patterns: ScrubPatterns | undefined,
): void {
  let headers = upstreamHeaders;
  let out = body;
  let reason = statusMessage;
  if (patterns?.active) {
    const codings = codingsToUndo(upstreamHeaders["content-encoding"], patterns);
    headers = { ...scrubHeaders(patterns, upstreamHeaders) };
    reason = patterns.scrubText(statusMessage);
    try {
      out = decodeWhole(codings, out);
    } catch {
      out = Buffer.alloc(0);
    }
    if (codings.length > 0) delete headers["content-encoding"];
    out = patterns.scrubBuffer(out);
  }
  const forwarded = forwardableResponseHeaders(headers);
  forwarded["content-length"] = String(out.length);
  res.writeHead(status, reason, forwarded);
  res.end(out);
}
