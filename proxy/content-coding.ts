// Content codings (RFC 9110 §8.4) keybroker can undo to read a body: a response it scrubs, a
// request body it checks for placeholders.
import type { Transform } from "node:stream";
import {
  brotliDecompressSync,
  createBrotliDecompress,
  createGunzip,
  createInflate,
  gunzipSync,
  inflateSync,
} from "node:zlib";

const DECODERS: Readonly<Record<string, { stream: () => Transform; sync: (b: Buffer) => Buffer }>> = {
  gzip: { stream: createGunzip, sync: gunzipSync },
  "x-gzip": { stream: createGunzip, sync: gunzipSync },
  deflate: { stream: createInflate, sync: inflateSync },
  br: { stream: createBrotliDecompress, sync: brotliDecompressSync },
};

/**
 * The codings a `content-encoding` header names, in the order they must be undone (the last
 * applied first), `identity` left out; `unknown` is the first one keybroker cannot undo.
 */
export function contentCodings(header: string | string[] | undefined): {
  codings: string[];
  unknown: string | undefined;
} {
  if (header === undefined) return { codings: [], unknown: undefined };
  const codings = (Array.isArray(header) ? header.join(",") : header)
    .split(",")
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== "" && c !== "identity");
  return { codings: codings.reverse(), unknown: codings.find((c) => DECODERS[c] === undefined) };
}

/** One stream that undoes `codings` in order: write to `head`, read from `tail`. */
export function decoderChain(codings: readonly string[]): { head: Transform; tail: Transform } | undefined {
  if (codings.length === 0) return undefined;
  const stages = codings.map((c) => DECODERS[c]!.stream());
  for (let i = 0; i + 1 < stages.length; i++) {
    stages[i]!.pipe(stages[i + 1]!);
    stages[i]!.on("error", (err) => stages.at(-1)!.destroy(err));
  }
  return { head: stages[0]!, tail: stages.at(-1)! };
}

/** `body` with `codings` undone. Throws when it is not validly encoded. */
export function decodeWhole(codings: readonly string[], body: Buffer): Buffer {
  let out = body;
  for (const c of codings) out = DECODERS[c]!.sync(out);
  return out;
}
