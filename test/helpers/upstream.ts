// A real HTTPS "provider" on 127.0.0.1 that records what it received. Its certificate comes
// from a CA made for the test, and it answers for any host name (SNI picks the leaf).
import { createHash } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type CertificateAuthority, loadOrCreateCa } from "../../certs/ca.js";
import { LeafMinter } from "../../certs/leaf.js";

export interface Received {
  readonly method: string;
  readonly url: string;
  readonly host: string | undefined;
  readonly sni: string | undefined;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly rawHeaders: string[];
  readonly body: Buffer;
}

export type Route = (req: IncomingMessage, res: ServerResponse, body: Buffer) => void | Promise<void>;

export interface FakeUpstream {
  readonly port: number;
  readonly ca: CertificateAuthority;
  /** Path of the PEM the broker must trust (upstream_ca). */
  readonly caPath: string;
  readonly received: Received[];
  /** Requests whose body is still streaming in get their route called before the body ends. */
  readonly streamingRoutes: Map<string, (req: IncomingMessage, res: ServerResponse) => void>;
  readonly routes: Map<string, Route>;
  /** WebSocket upgrades by path, instead of the default greeting-and-echo socket. */
  readonly upgrades: Map<string, (req: IncomingMessage, socket: import("node:net").Socket) => void>;
  /** Number of TLS connections accepted. */
  connections: number;
  close(): Promise<void>;
}

function chatCompletion(): string {
  return JSON.stringify({
    id: "chatcmpl-test",
    object: "chat.completion",
    created: 1_700_000_000,
    model: "gpt-test",
    choices: [
      { index: 0, message: { role: "assistant", content: "hello from upstream" }, finish_reason: "stop" },
    ],
    usage: { prompt_tokens: 1, completion_tokens: 3, total_tokens: 4 },
  });
}

function anthropicMessage(): string {
  return JSON.stringify({
    id: "msg_test",
    type: "message",
    role: "assistant",
    model: "claude-test",
    content: [{ type: "text", text: "hello from upstream" }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 1, output_tokens: 3 },
  });
}

function json(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

/** What the upstream records of one request (or upgrade request) it received. */
function receivedOf(req: IncomingMessage, body: Buffer): Received {
  return {
    method: req.method ?? "",
    url: req.url ?? "",
    host: req.headers.host,
    sni: (req.socket as { servername?: string }).servername,
    headers: { ...req.headers },
    rawHeaders: [...req.rawHeaders],
    body,
  };
}

/**
 * The fake upstreams' CA, made once per test process: it stands for a public CA, and its RSA key
 * took ~150 ms to make for each upstream. Each upstream still has its own listener and leaves.
 */
let upstreamCa: CertificateAuthority | undefined;

export async function startUpstream(): Promise<FakeUpstream> {
  upstreamCa ??= loadOrCreateCa(mkdtempSync(join(tmpdir(), "kb-upstream-")));
  const ca = upstreamCa;
  const minter = new LeafMinter(ca);
  const received: Received[] = [];
  const routes = new Map<string, Route>();
  const streamingRoutes = new Map<string, (req: IncomingMessage, res: ServerResponse) => void>();
  const upgrades = new Map<string, (req: IncomingMessage, socket: import("node:net").Socket) => void>();
  routes.set("POST /v1/chat/completions", (_req, res) => json(res, 200, chatCompletion()));
  routes.set("POST /v1/messages", (_req, res) => json(res, 200, anthropicMessage()));

  const fallback = minter.mint("localhost");
  const server: Server = createServer({
    SNICallback: (name, cb) => cb(null, minter.secureContext(name)),
    cert: fallback.certPem,
    key: fallback.keyPem,
  });
  const up = {
    port: 0,
    ca,
    caPath: ca.certPath,
    received,
    routes,
    streamingRoutes,
    upgrades,
    connections: 0,
    close: async () => {
      server.closeAllConnections();
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const sockets = new Set<import("node:net").Socket>();
  server.on("secureConnection", (socket: import("node:net").Socket) => {
    up.connections++;
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? "/").split("?")[0]!;
    const key = `${req.method} ${path}`;
    const streaming = streamingRoutes.get(key);
    const record = (body: Buffer) => received.push(receivedOf(req, body));
    if (streaming !== undefined) {
      record(Buffer.alloc(0));
      streaming(req, res);
      return;
    }
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      record(body);
      // A Gemini-style `/models/<model>:<method>` path also matches its `/models/*:<method>` route.
      const route = routes.get(key) ?? routes.get(key.replace(/\/models\/[^/:]+:/, "/models/*:"));
      if (route === undefined) json(res, 200, JSON.stringify({ ok: true, path }));
      else void route(req, res, body);
    });
  });
  // WebSocket: accept the upgrade, record it like a request, send one text frame, echo the rest.
  server.on("upgrade", (req: IncomingMessage, socket: import("node:net").Socket) => {
    received.push(receivedOf(req, Buffer.alloc(0)));
    const own = upgrades.get((req.url ?? "/").split("?")[0]!);
    if (own !== undefined) return own(req, socket);
    // `?refuse=1`: the upgrade is refused with a 401 whose body echoes the credential;
    // `?refuse=2`: its reason phrase and a header name echo it too.
    const refuse = /refuse=([12])/.exec(req.url ?? "")?.[1];
    if (refuse !== undefined) {
      const auth = String(req.headers.authorization ?? "");
      const body = JSON.stringify({ error: { message: `bad key: ${auth}` } });
      const reason = refuse === "2" ? `Bad key ${auth}` : "Unauthorized";
      const named = refuse === "2" ? `X-Key-${auth.replace(/^Bearer /, "")}: 1\r\n` : "";
      socket.end(
        `HTTP/1.1 401 ${reason}\r\n${named}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
      return;
    }
    const accept = createHash("sha1")
      .update(`${req.headers["sec-websocket-key"]}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
      .digest("base64");
    // `?echo=1`: a careless upstream that echoes the credential in a header and a frame.
    const echo = (req.url ?? "").includes("echo=1") ? String(req.headers.authorization ?? "") : undefined;
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n${
        echo === undefined ? "" : `X-Echo: ${echo}\r\n`
      }\r\n`,
    );
    const text = Buffer.from(echo ?? "hello from upstream");
    socket.write(Buffer.concat([Buffer.from([0x81, text.length]), text]));
    socket.on("error", () => socket.destroy());
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  up.port = (server.address() as AddressInfo).port;
  return up;
}
