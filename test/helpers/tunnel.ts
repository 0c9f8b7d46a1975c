// A raw TLS connection to `host` through the broker's CONNECT tunnel, trusting its CA: for
// tests that write requests by hand and read every byte the broker answers.
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import type { Socket } from "node:net";
import { type TLSSocket, connect as tlsConnect } from "node:tls";

/** `headers` go with the CONNECT (a client's Proxy-Authorization). */
export async function openTunnel(
  broker: { readonly port: number; readonly caPath: string },
  host: string,
  headers: Record<string, string> = {},
): Promise<TLSSocket> {
  const connect = httpRequest({
    host: "127.0.0.1",
    port: broker.port,
    method: "CONNECT",
    path: `${host}:443`,
    headers,
  });
  connect.end();
  const [res, tunnel] = (await once(connect, "connect")) as [{ statusCode: number }, Socket];
  if (res.statusCode !== 200) throw new Error(`CONNECT ${host}:443 answered ${res.statusCode}`);
  const tls = tlsConnect({ socket: tunnel, servername: host, ca: readFileSync(broker.caPath, "utf8") });
  await once(tls, "secureConnect");
  return tls;
}
