// Raw sockets toward the broker: bytes exactly as a test writes them, on the listener or inside
// an intercepted TLS connection, and everything the broker answered until it closed.
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { connect as netConnect, type Socket } from "node:net";
import { type TLSSocket, connect as tlsConnect } from "node:tls";

export interface Closed {
  /** Everything received, as text. */
  readonly text: string;
  /** Milliseconds from `since` to the close. */
  readonly afterMs: number;
}

/** Collects what `socket` receives until it closes (a reset counts as a close). */
export function untilClosed(socket: Socket | TLSSocket, since = performance.now()): Promise<Closed> {
  let text = "";
  socket.on("data", (d: Buffer) => {
    text += d.toString("latin1");
  });
  socket.on("error", () => {});
  return new Promise((resolve) => {
    socket.once("close", () => resolve({ text, afterMs: performance.now() - since }));
  });
}

export async function openSocket(port: number): Promise<Socket> {
  const socket = netConnect(port, "127.0.0.1");
  socket.on("error", () => {});
  await once(socket, "connect");
  return socket;
}

/** Sends `request` on a fresh connection to the listener; resolves with all it answered. */
export async function rawExchange(port: number, request: string): Promise<string> {
  const socket = await openSocket(port);
  const closed = untilClosed(socket);
  socket.write(request);
  return (await closed).text;
}

/**
 * A CONNECT on a fresh connection; resolves with the socket once the broker answered 200.
 * `client` ("name:token") is sent as the Proxy-Authorization a named client's proxy URL carries.
 */
export async function connectThrough(port: number, target: string, client?: string): Promise<Socket> {
  const socket = await openSocket(port);
  const auth =
    client === undefined ? "" : `Proxy-Authorization: Basic ${Buffer.from(client).toString("base64")}\r\n`;
  socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n${auth}\r\n`);
  const [head] = (await once(socket, "data")) as [Buffer];
  if (!head.toString().startsWith("HTTP/1.1 200")) throw new Error(`CONNECT refused: ${head.toString()}`);
  return socket;
}

/** An intercepted connection to `host:443`, TLS done, trusting the broker's CA. */
export async function openTunnel(port: number, host: string, caPath: string): Promise<TLSSocket> {
  const socket = await connectThrough(port, `${host}:443`);
  const tls = tlsConnect({ socket, servername: host, ca: readFileSync(caPath, "utf8") });
  tls.on("error", () => {});
  await once(tls, "secureConnect");
  return tls;
}

/** Sends `request` inside a fresh intercepted connection; resolves with all it answered. */
export async function tunnelExchange(
  port: number,
  host: string,
  caPath: string,
  request: string,
): Promise<string> {
  const tls = await openTunnel(port, host, caPath);
  const closed = untilClosed(tls);
  tls.write(request);
  return (await closed).text;
}

/** The parts of an HTTP answer a test looks at. */
export function parseAnswer(text: string): {
  status: number;
  headers: Record<string, string>;
  body: string;
} {
  const end = text.indexOf("\r\n\r\n");
  const head = end === -1 ? text : text.slice(0, end);
  const [statusLine = "", ...lines] = head.split("\r\n");
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(":");
    if (colon > 0) headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
  }
  return {
    status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? 0),
    headers,
    body: end === -1 ? "" : text.slice(end + 4),
  };
}

/** Asserts docs/spec.md §11's shape: JSON body with error.type, and the same code in x-keybroker-error. */
export function brokerError(text: string): { status: number; code: string; message: string } {
  const answer = parseAnswer(text);
  const body = JSON.parse(answer.body) as { error: { type: string; message: string } };
  const code = answer.headers["x-keybroker-error"];
  if (code === undefined || code !== body.error.type)
    throw new Error(`not a keybroker error answer:\n${text}`);
  return { status: answer.status, code, message: body.error.message };
}
