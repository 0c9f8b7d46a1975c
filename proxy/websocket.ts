// WebSocket upgrades (OpenAI Realtime and the like): the upgrade request goes through the same
// stages as any other, so the credential is injected into it; then the two sockets are joined.

import type { Socket } from "node:net";
import { type Duplex, Transform } from "node:stream";
import type { Agent, Dispatcher } from "undici";
import { type Exchange, originOf } from "./exchange.js";
import { upstreamError } from "./forward.js";
import { removeHeader } from "./headers.js";
import { ResponseScrubber, scrubHeaders } from "./scrub-stream.js";

function headerLines(headers: Record<string, string | string[] | undefined>): string {
  let out = "";
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) out += `${name}: ${v}\r\n`;
  }
  return out;
}

export async function forwardUpgrade(agent: Agent, x: Exchange, client: Socket, head: Buffer): Promise<void> {
  const protocol = String(x.req.headers.upgrade ?? "websocket");
  // Compressed frames could hide an echo of the credential from the scrubber.
  if (x.secret !== undefined) removeHeader(x.headers, "sec-websocket-extensions");
  let data: Dispatcher.UpgradeData;
  try {
    data = await agent.upgrade({
      origin: originOf(x),
      path: x.path,
      method: x.req.method ?? "GET",
      headers: x.headers,
      protocol,
    } as Dispatcher.UpgradeOptions);
  } catch (err) {
    throw upstreamError(err, x);
  }
  const upstream: Duplex = data.socket;
  if (client.destroyed) {
    upstream.destroy();
    return;
  }
  // The response object was only a vehicle for errors: from here on the socket is raw.
  x.res.detachSocket(client);
  const patterns = x.rt.scrubPatterns(x);
  const headers = patterns?.active ? scrubHeaders(patterns, data.headers) : data.headers;
  client.write(`HTTP/1.1 101 Switching Protocols\r\n${headerLines(headers)}\r\n`);
  if (head.length > 0) upstream.write(head);
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
}
