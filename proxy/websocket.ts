// WebSocket upgrades (OpenAI Realtime and the like): the upgrade request goes through the same
// stages as any other, so the credential is injected into it; then the two sockets are joined.

import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { Agent, Dispatcher } from "undici";
import { type Exchange, originOf } from "./exchange.js";
import { upstreamError } from "./forward.js";

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
  client.write(`HTTP/1.1 101 Switching Protocols\r\n${headerLines(data.headers)}\r\n`);
  if (head.length > 0) upstream.write(head);
  client.on("error", () => upstream.destroy());
  upstream.on("error", () => client.destroy());
  client.on("close", () => upstream.destroy());
  upstream.on("close", () => client.destroy());
  client.pipe(upstream);
  upstream.pipe(client);
}
