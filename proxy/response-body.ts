// The response on its way to the client. For a request that carried a real credential, every
// echo of it in the headers and the body is replaced by the client's placeholder (SPEC §3.3):
//   - a small body with a known length is scrubbed whole and sent with its new length (one write);
//   - anything else streams through the scrubber, which holds back at most one pattern's length;
//     a larger body of known length keeps it (replacements fitted to the replaced length), one
//     of unknown length goes out chunked;
//   - a compressed body is decompressed first and sent uncompressed.
// Without a credential the response passes through untouched.
import type { IncomingHttpHeaders, ServerResponse } from "node:http";
import type { Transform } from "node:stream";
import {
  brotliDecompressSync,
  createBrotliDecompress,
  createGunzip,
  createInflate,
  gunzipSync,
  inflateSync,
} from "node:zlib";
import { forwardableResponseHeaders } from "./headers.js";
import { ResponseScrubber, type ScrubPatterns, scrubHeaders } from "./scrub-stream.js";

/** Bodies up to this size (with a Content-Length) are scrubbed in one piece. */
const WHOLE_LIMIT = 64 * 1024;

function decompressor(encoding: string | undefined): Transform | undefined {
  switch (encoding?.trim().toLowerCase()) {
    case "gzip":
    case "x-gzip":
      return createGunzip();
    case "deflate":
      return createInflate();
    case "br":
      return createBrotliDecompress();
    default:
      return undefined;
  }
}

export interface BodySink {
  /** Writes a chunk; false asks the caller to pause until `onceDrain` fires. */
  write(chunk: Buffer): boolean;
  onceDrain(resume: () => void): void;
  /** Ends the body; `done` runs when everything has been handed to the socket. */
  end(done: () => void): void;
}

/** Writes the response head and returns where its body goes. */
export function startResponse(
  res: ServerResponse,
  status: number,
  statusMessage: string,
  upstreamHeaders: IncomingHttpHeaders,
  patterns: ScrubPatterns | undefined,
): BodySink {
  if (patterns === undefined || !patterns.active) {
    res.writeHead(status, statusMessage, forwardableResponseHeaders(upstreamHeaders));
    // An event stream's head goes out at once; other heads ride with the first body bytes.
    if (String(upstreamHeaders["content-type"] ?? "").startsWith("text/event-stream")) res.flushHeaders();
    return {
      write: (chunk) => res.write(chunk),
      onceDrain: (resume) => res.once("drain", resume),
      end: (done) => {
        res.end();
        res.once("finish", done);
      },
    };
  }

  const headers = forwardableResponseHeaders(scrubHeaders(patterns, upstreamHeaders));
  const inflate = decompressor(upstreamHeaders["content-encoding"]);
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
        const body = patterns.scrubBuffer(Buffer.concat(chunks));
        headers["content-length"] = String(body.length);
        res.writeHead(status, statusMessage, headers);
        res.end(body);
        res.once("finish", done);
      },
    };
  }

  // A large body of known length keeps it: replacements are fitted to what they replace (the
  // placeholder cut or padded with `*`), so no chunked re-encoding is needed. Otherwise the
  // length may change, and the body goes out chunked.
  const keepLength = inflate === undefined && Number.isFinite(length);
  if (!keepLength) delete headers["content-length"];
  if (inflate !== undefined) delete headers["content-encoding"];
  res.writeHead(status, statusMessage, headers);
  if (String(upstreamHeaders["content-type"] ?? "").startsWith("text/event-stream")) res.flushHeaders();
  const scrubber = new ResponseScrubber(keepLength ? patterns.sameLength() : patterns);
  const emit = (chunk: Buffer): boolean => {
    const out = scrubber.push(chunk);
    return out.length === 0 ? true : res.write(out);
  };
  if (inflate === undefined) {
    return {
      write: emit,
      onceDrain: (resume) => res.once("drain", resume),
      end: (done) => {
        const tail = scrubber.end();
        res.end(tail.length > 0 ? tail : undefined);
        res.once("finish", done);
      },
    };
  }
  inflate.on("data", (chunk: Buffer) => {
    if (!emit(chunk)) {
      inflate.pause();
      res.once("drain", () => inflate.resume());
    }
  });
  inflate.on("error", () => res.destroy());
  return {
    write: (chunk) => inflate.write(chunk),
    onceDrain: (resume) => inflate.once("drain", resume),
    end: (done) => {
      inflate.once("end", () => {
        const tail = scrubber.end();
        res.end(tail.length > 0 ? tail : undefined);
        res.once("finish", done);
      });
      inflate.end();
    },
  };
}

/** Sends a response that was held back whole (an error answer), scrubbed. */
export function sendWhole(
  res: ServerResponse,
  status: number,
  statusMessage: string,
  upstreamHeaders: IncomingHttpHeaders,
  body: Buffer,
  patterns: ScrubPatterns | undefined,
): void {
  let headers = upstreamHeaders;
  let out = body;
  if (patterns?.active) {
    headers = { ...scrubHeaders(patterns, upstreamHeaders) };
    const encoding = upstreamHeaders["content-encoding"]?.trim().toLowerCase();
    try {
      if (encoding === "gzip" || encoding === "x-gzip") out = gunzipSync(body);
      else if (encoding === "deflate") out = inflateSync(body);
      else if (encoding === "br") out = brotliDecompressSync(body);
      if (out !== body) delete headers["content-encoding"];
    } catch {
      out = Buffer.alloc(0);
    }
    out = patterns.scrubBuffer(out);
  }
  const forwarded = forwardableResponseHeaders(headers);
  forwarded["content-length"] = String(out.length);
  res.writeHead(status, statusMessage, forwarded);
  res.end(out);
}
