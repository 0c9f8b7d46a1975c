// node:http2 as a raw client through the broker: a CONNECT, TLS offering `h2` with the broker's
// CA, then an HTTP/2 session on that connection. For streams a test shapes itself (trailers,
// resets, floods); real clients (curl, undici, grpc-js) are used wherever they can say it.
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { type ClientHttp2Session, connect as h2connect, type IncomingHttpHeaders } from "node:http2";
import { type TLSSocket, connect as tlsConnect } from "node:tls";
import { connectThrough } from "./raw.js";

/**
 * An HTTP/2 session to `host:443` inside an intercepted connection; its ALPN is what the broker
 * chose. `client` ("name:token"): the tunnel is opened as that client.
 */
export async function h2Through(
  port: number,
  host: string,
  caPath: string,
  client?: string,
): Promise<{ session: ClientHttp2Session; tls: TLSSocket }> {
  const socket = await connectThrough(port, `${host}:443`, client);
  const tls = tlsConnect({
    socket,
    servername: host,
    ca: readFileSync(caPath, "utf8"),
    ALPNProtocols: ["h2"],
  });
  tls.on("error", () => {});
  await once(tls, "secureConnect");
  if (tls.alpnProtocol !== "h2") throw new Error(`the broker chose ${String(tls.alpnProtocol)}, not h2`);
  const session = h2connect(`https://${host}`, { createConnection: () => tls });
  session.on("error", () => {});
  return { session, tls };
}

export interface H2Answer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  readonly trailers: IncomingHttpHeaders;
  /** The RST_STREAM code the stream closed with (0: none). */
  readonly rstCode: number;
}

/** One request on `session`; resolves when its stream has closed. */
export function h2Request(
  session: ClientHttp2Session,
  headers: Record<string, string>,
  body?: string | Buffer,
): Promise<H2Answer> {
  return new Promise((resolve) => {
    const stream = session.request(headers, { endStream: body === undefined });
    let status = 0;
    let head: IncomingHttpHeaders = {};
    let trailers: IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    stream.on("response", (h) => {
      status = Number(h[":status"]);
      head = h;
    });
    stream.on("trailers", (t) => {
      trailers = t;
    });
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("error", () => {});
    stream.on("close", () =>
      resolve({
        status,
        headers: head,
        body: Buffer.concat(chunks).toString(),
        trailers,
        rstCode: stream.rstCode ?? 0,
      }),
    );
    if (body !== undefined) stream.end(body);
  });
}
