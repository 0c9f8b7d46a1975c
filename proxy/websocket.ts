// WebSocket upgrades (OpenAI Realtime and the like): the upgrade request goes through the same
// stages as any other, so the credential is injected into it; then the two sockets are joined.

import type { IncomingHttpHeaders, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { type Duplex, Transform } from "node:stream";
import type { Agent, Dispatcher } from "undici";
import { type Exchange, originOf, upstreamTimeoutMs } from "./exchange.js";
import { type HeldResponse, HOLD_LIMIT, upstreamError } from "./forward.js";
import { removeHeader } from "./headers.js";
import { type BodySink, startResponse } from "./response-body.js";
import { ResponseScrubber, scrubHeaders } from "./scrub-stream.js";
import { withoutReadAhead } from "./upstream-h1-wire.js";

/**
 * An HTTP/1.1 upgrade: the client's raw socket, the bytes read past the request's head, and the
 * response bound to that socket (for a refusal, until the sockets are joined).
 */
export interface Upgrade {
  readonly socket: Socket;
  readonly head: Buffer;
  readonly res: ServerResponse;
}

function headerLines(headers: Record<string, string | string[] | undefined>): string {
  let out = "";
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) out += `${name}: ${v}\r\n`;
  }
  return out;
}

/**
 * Forwards an upgrade request. Resolves with 101 once the sockets are joined, or with the
 * upstream's own answer when it refused the upgrade (a 401 for a bad key, a 403, a 426…): that
 * answer has gone to the client like any response, scrubbed, and is returned (its body up to
 * HOLD_LIMIT) so the pool can mark the credential.
 */
export async function forwardUpgrade(
  agent: Agent,
  x: Exchange,
  upgrade: Upgrade,
): Promise<101 | HeldResponse> {
  const { socket: client, head, res } = upgrade;
  const protocol = String(x.req.headers.upgrade ?? "websocket");
  // Compressed frames could hide an echo of the credential from the scrubber.
  if (x.secret !== undefined) removeHeader(x.headers, "sec-websocket-extensions");
  const patterns = x.rt.scrubPatterns(x);
  let data: { headers: IncomingHttpHeaders; socket: Duplex } | { refused: HeldResponse };
  try {
    data = await new Promise((resolve, reject) => {
      let sink: BodySink | undefined;
      // The refusal as it came, its body kept up to HOLD_LIMIT, for the pool's bookkeeping.
      const answer = { status: 0, statusMessage: "", headers: {} as IncomingHttpHeaders };
      const kept: Buffer[] = [];
      let keptBytes = 0;
      const refused = (): { refused: HeldResponse } => ({
        refused: { ...answer, body: Buffer.concat(kept) },
      });
      const handler: Dispatcher.DispatchHandler = {
        // undici tells this handler API from its older one by this method.
        onRequestStart() {},
        onRequestUpgrade(_c, _statusCode, headers, socket) {
          resolve({ headers, socket });
        },
        onResponseStart(c, statusCode, headers, statusMessage) {
          if (statusCode < 200) return;
          Object.assign(answer, { status: statusCode, statusMessage: statusMessage ?? "", headers });
          try {
            sink = startResponse(res, statusCode, statusMessage ?? "", headers, patterns);
          } catch (err) {
            c.abort(err as Error); // a body keybroker cannot scrub
          }
        },
        onResponseData(c, chunk: Buffer) {
          if (keptBytes < HOLD_LIMIT) {
            kept.push(chunk);
            keptBytes += chunk.length;
          }
          if (sink !== undefined && !sink.write(chunk)) {
            c.pause();
            sink.onceDrain(() => c.resume());
          }
        },
        onResponseEnd() {
          if (sink === undefined) {
            // Only informational answers came: nothing to pass on.
            client.destroy();
            resolve(refused());
            return;
          }
          sink.end(() => {
            client.end();
            resolve(refused());
          });
        },
        onResponseError(_c, err) {
          if (res.headersSent) {
            client.destroy();
            resolve(refused());
          } else reject(err);
        },
      };
      agent.dispatch(
        {
          origin: originOf(x),
          path: x.path,
          method: x.method as Dispatcher.HttpMethod,
          headers: x.headers,
          upgrade: protocol,
          headersTimeout: upstreamTimeoutMs(x),
        },
        handler,
      );
    });
  } catch (err) {
    throw upstreamError(err, x);
  }
  if ("refused" in data) return data.refused;
  const upstream: Duplex = data.socket;
  if (client.destroyed) {
    upstream.destroy();
    return 101;
  }
  // The response object was only a vehicle for errors: from here on the socket is raw.
  res.detachSocket(client);
  const headers = patterns?.active ? scrubHeaders(patterns, data.headers) : data.headers;
  client.write(`HTTP/1.1 101 Switching Protocols\r\n${headerLines(headers)}\r\n`);
  if (head.length > 0) upstream.write(head);
  // Each frame read on either side would otherwise cost a read-ahead turn (decision 201).
  withoutReadAhead(client);
  withoutReadAhead(upstream);
  client.on("error", () => upstream.destroy());
  upstream.on("error", () => client.destroy());
  client.on("close", () => upstream.destroy());
  upstream.on("close", () => client.destroy());
  client.pipe(upstream);
  if (patterns?.active) {
    // Frames from the upstream pass the scrubber with length-preserving replacements, so the
    // frame headers' lengths stay true (compression was not offered for such upgrades).
    const scrubber = new ResponseScrubber(patterns.sameLength());
    const scrub = new Transform({
      transform(chunk: Buffer, _enc, done) {
        done(null, scrubber.push(chunk));
      },
      flush(done) {
        done(null, scrubber.end());
      },
    });
    upstream.pipe(scrub).pipe(client);
  } else {
    upstream.pipe(client);
  }
  return 101;
}
