// A real HTTP/2-only "provider" on 127.0.0.1 (node:http2 over TLS, no HTTP/1.1 fallback), with
// a leaf from a CA made for the test for any name it is asked by (SNI). It records each
// stream's head and body; a route answers it, the default echoes what it got as JSON.
import { once } from "node:events";
import { mkdtempSync } from "node:fs";
import {
  createSecureServer,
  type Http2SecureServer,
  type IncomingHttpHeaders,
  type ServerHttp2Stream,
  type Settings,
} from "node:http2";
import type { AddressInfo, Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadOrCreateCa } from "../../certs/ca.js";
import { LeafMinter } from "../../certs/leaf.js";

export interface H2Received {
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

export type H2Route = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, body: Buffer) => void;
/** A route that takes the stream as it comes, before its body has ended (gRPC streaming). */
export type H2StreamingRoute = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => void;

export interface H2Upstream {
  readonly port: number;
  readonly caPath: string;
  readonly received: H2Received[];
  readonly routes: Map<string, H2Route>;
  readonly streaming: Map<string, H2StreamingRoute>;
  /** TLS connections accepted, and the ALPN each chose. */
  readonly protocols: string[];
  readonly server: Http2SecureServer;
  close(): Promise<void>;
}

/** `settings`: the server's HTTP/2 settings (e.g. a provider's `maxConcurrentStreams`). */
export async function startH2Upstream(opts: { settings?: Settings } = {}): Promise<H2Upstream> {
  const dir = mkdtempSync(join(tmpdir(), "kb-h2-upstream-"));
  const ca = loadOrCreateCa(dir);
  const minter = new LeafMinter(ca);
  const fallback = minter.mint("localhost");
  const server = createSecureServer({
    SNICallback: (name, cb) => cb(null, minter.secureContext(name)),
    cert: fallback.certPem,
    key: fallback.keyPem,
    allowHTTP1: false,
    ...(opts.settings === undefined ? {} : { settings: opts.settings }),
  });
  const received: H2Received[] = [];
  const routes = new Map<string, H2Route>();
  const streaming = new Map<string, H2StreamingRoute>();
  const protocols: string[] = [];
  const sockets = new Set<Socket>();
  server.on("secureConnection", (socket: Socket & { alpnProtocol?: string | false }) => {
    protocols.push(String(socket.alpnProtocol));
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  server.on("stream", (stream, headers) => {
    stream.on("error", () => {});
    const path = String(headers[":path"]).split("?")[0]!;
    const live = streaming.get(path);
    if (live !== undefined) {
      received.push({ headers, body: Buffer.alloc(0) });
      live(stream, headers);
      return;
    }
    const chunks: Buffer[] = [];
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("end", () => {
      const body = Buffer.concat(chunks);
      received.push({ headers, body });
      const route = routes.get(path);
      if (route !== undefined) {
        route(stream, headers, body);
        return;
      }
      const out = JSON.stringify({ ok: true, path, protocol: "h2" });
      stream.respond({ ":status": 200, "content-type": "application/json" });
      stream.end(out);
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return {
    port: (server.address() as AddressInfo).port,
    caPath: ca.certPath,
    received,
    routes,
    streaming,
    protocols,
    server,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
