// docs/spec.md §3.2 under `intercept: all`: a placeholder can also leave in a request body (a form, a
// JSON field, base64, gzip-encoded, chunked) bound for a host without a provider. Such bodies
// are searched, streaming, in every form the response scrubber knows, after undoing their
// content-encoding: a body read ahead is refused before anything is sent; a streamed one is cut
// off (the upstream request aborted) at the chunk that holds a placeholder, which never leaves,
// and the client gets 403 `placeholder_host_mismatch` when nothing was answered yet.
//
// Only such requests pay for it: hosts with a provider, reverse mode and `intercept: providers`
// skip this stage at its first test.
import { Transform, type TransformCallback } from "node:stream";
import { BrokerError } from "../../core/errors.js";
import { Phantoms } from "../../secrets/oauth/phantoms.js";
import type { PlaceholderIndex, PlaceholderOwner } from "../../secrets/placeholders.js";
import { contentCodings, decoderChain, decodeWhole } from "../content-coding.js";
import type { Exchange } from "../exchange.js";
import { hasBody } from "../forward.js";
import { ScrubPatterns } from "../scrub-stream.js";

interface Search {
  readonly patterns: ScrubPatterns;
  readonly owners: readonly PlaceholderOwner[];
}

/** Built once per rule set (its placeholder index), on the first body it is needed for. */
const searches = new WeakMap<PlaceholderIndex, Search>();

function searchFor(index: PlaceholderIndex): Search {
  let search = searches.get(index);
  if (search === undefined) {
    const entries = [...index.entries()];
    search = {
      patterns: new ScrubPatterns(entries.map(([placeholder]) => ({ secret: placeholder, replacement: "" }))),
      owners: entries.map(([, owner]) => owner),
    };
    searches.set(index, search);
  }
  return search;
}

function leak(x: Exchange, owner: PlaceholderOwner): BrokerError {
  return new BrokerError(
    "placeholder_host_mismatch",
    `a placeholder of provider "${owner.provider}" (in the request body) was bound for ${x.host}, which is not one of its hosts; the request was blocked`,
    { provider: owner.provider, hint: `send ${owner.provider} requests only to its own hosts` },
  );
}

function unreadable(x: Exchange, why: string): BrokerError {
  return new BrokerError(
    "bad_request",
    `the request body to ${x.host} ${why}, so keybroker cannot check it for placeholders; it was not sent`,
    { hint: "send it uncompressed, or with gzip, deflate or br" },
  );
}

export function checkBodyPlaceholders(x: Exchange): void {
  if (x.provider !== undefined || x.sharedHost !== undefined || x.mode === "reverse") return;
  if (x.rt.rules.intercept !== "all") return;
  const search = searchFor(x.rt.placeholders);
  if (!search.patterns.active) return;
  if (x.body === undefined ? !hasBody(x) : x.body.length === 0) return;
  const header = x.req.headers["content-encoding"];
  const { codings, unknown } = contentCodings(header);
  if (unknown !== undefined) throw unreadable(x, `has content-encoding "${String(header)}"`);
  if (x.body !== undefined) {
    let decoded: Buffer;
    try {
      decoded = decodeWhole(codings, x.body);
    } catch {
      throw unreadable(x, `is not valid ${String(header)}`);
    }
    const { pair } = search.patterns.firstMatch(decoded, true);
    if (pair !== -1) throw leak(x, search.owners[pair]!);
    // A phantom token (docs/spec.md §19) is found by its shape and signature, in a body read whole; a
    // streamed body is searched for placeholders only (decision 167).
    const text = decoded.toString("latin1");
    if (Phantoms.mayHold(text)) {
      const found = x.rt.phantoms.find(text)[0];
      if (found !== undefined) throw leak(x, { client: "", provider: found.binding.provider, shared: false });
    }
    return;
  }
  const scan = new BodyScan(x, search, codings, String(header));
  x.req.pipe(scan);
  x.bodyStream = scan;
}

const EMPTY = Buffer.alloc(0);

/**
 * The body on its way upstream. Plain: each chunk is searched with the tail held back from the
 * last (a placeholder split across chunks is caught before any of it leaves). Encoded: the
 * decoded text is searched; an encoded chunk is released once the next has been decoded and
 * no decoded tail is held.
 */
class BodyScan extends Transform {
  readonly #x: Exchange;
  readonly #search: Search;
  readonly #header: string;
  #held = EMPTY;
  readonly #decoder: ReturnType<typeof decoderChain>;
  readonly #queue: Buffer[] = [];
  #failed: BrokerError | undefined;

  constructor(x: Exchange, search: Search, codings: readonly string[], header: string) {
    super();
    this.#x = x;
    this.#search = search;
    this.#header = header;
    this.#decoder = decoderChain(codings);
    if (this.#decoder !== undefined) {
      const { tail } = this.#decoder;
      tail.on("data", (decoded: Buffer) => {
        if (this.#failed === undefined) this.#scan(decoded, false);
      });
      tail.on("error", () => {
        this.#failed ??= unreadable(this.#x, `is not valid ${this.#header}`);
      });
    }
  }

  /** Searches the next piece of text; returns what may be sent of it (plain bodies). */
  #scan(chunk: Buffer, final: boolean): Buffer {
    const data = this.#held.length === 0 ? chunk : Buffer.concat([this.#held, chunk]);
    const { pair, hold } = this.#search.patterns.firstMatch(data, final);
    if (pair !== -1) {
      this.#failed = leak(this.#x, this.#search.owners[pair]!);
      this.#x.refusedBody = this.#failed;
      return EMPTY;
    }
    this.#held = hold === data.length ? EMPTY : Buffer.from(data.subarray(hold));
    return hold === data.length ? data : data.subarray(0, hold);
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    if (this.#decoder === undefined) {
      const out = this.#scan(chunk, false);
      done(this.#failed, this.#failed === undefined && out.length > 0 ? out : undefined);
      return;
    }
    this.#queue.push(chunk);
    this.#decoder.head.write(chunk, () => {
      if (this.#failed !== undefined) {
        done(this.#failed);
        return;
      }
      if (this.#held.length === 0) while (this.#queue.length > 1) this.push(this.#queue.shift());
      done();
    });
  }

  override _flush(done: TransformCallback): void {
    const finish = () => {
      const out = this.#failed === undefined ? this.#scan(EMPTY, true) : EMPTY;
      if (this.#failed !== undefined) {
        done(this.#failed);
        return;
      }
      if (this.#decoder === undefined) {
        done(null, out.length > 0 ? out : undefined);
        return;
      }
      for (const chunk of this.#queue) this.push(chunk);
      done();
    };
    if (this.#decoder === undefined) {
      finish();
      return;
    }
    const { head, tail } = this.#decoder;
    tail.once("end", finish);
    tail.once("error", finish);
    head.end();
  }
}
