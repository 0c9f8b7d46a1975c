// The byte relays of `run --isolate` (decision 115). An isolated agent has its own network
// namespace with nothing but loopback: inside, a listener at the address the proxy variables
// name hands each connection to a unix socket in the launch's folder; outside, `run` accepts on
// that socket and connects to the broker. `--allow-connect host:port` listeners do the same and
// open the broker's CONNECT tunnel to that one destination before passing bytes.
import { connect, createServer, type Server, type Socket } from "node:net";

/** Pipes two sockets into each other; either side closing or failing ends both. */
export function splice(a: Socket, b: Socket): void {
  a.setNoDelay(true);
  if (typeof b.setNoDelay === "function") b.setNoDelay(true);
  const end = () => {
    a.destroy();
    b.destroy();
  };
  a.on("error", end).on("close", end);
  b.on("error", end).on("close", end);
  a.pipe(b);
  b.pipe(a);
}

/** Listens on `listen` (a unix socket path, or host and port) and relays each connection to `to`. */
export function relay(listen: string | { host: string; port: number }, to: () => Socket): Promise<Server> {
  const server = createServer({ noDelay: true }, (client) => splice(client, to()));
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    const ready = () => {
      server.off("error", reject);
      resolve(server);
    };
    if (typeof listen === "string") server.listen(listen, ready);
    else server.listen(listen.port, listen.host, ready);
  });
}

/** The most a proxy's answer to CONNECT may take before the tunnel's bytes start. */
const MAX_CONNECT_ANSWER = 16 * 1024;

/**
 * Listens on `listen` and, for each connection, asks the broker (reached by `socketPath`) for a
 * CONNECT tunnel to `target` (`host:port`) with `authorization` (a Proxy-Authorization value),
 * then passes the bytes. A refused tunnel closes the connection: the agent's client sees the
 * destination hang up, and the broker's audit log says why.
 */
export function connectRelay(
  listen: { host: string; port: number },
  socketPath: string,
  target: string,
  authorization: string | undefined,
): Promise<Server> {
  const server = createServer({ noDelay: true, pauseOnConnect: true }, (client) => {
    client.on("error", () => client.destroy());
    const broker = connect(socketPath);
    broker.on("error", () => {
      broker.destroy();
      client.destroy();
    });
    const auth = authorization === undefined ? "" : `proxy-authorization: ${authorization}\r\n`;
    broker.write(`CONNECT ${target} HTTP/1.1\r\nhost: ${target}\r\n${auth}\r\n`);
    let answer = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      answer = Buffer.concat([answer, chunk]);
      const end = answer.indexOf("\r\n\r\n");
      if (end === -1) {
        if (answer.length > MAX_CONNECT_ANSWER) broker.destroy();
        return;
      }
      broker.off("data", onData);
      if (!/^HTTP\/1\.[01] 200 /.test(answer.subarray(0, end).toString("latin1"))) {
        broker.destroy();
        client.destroy();
        return;
      }
      const rest = answer.subarray(end + 4);
      if (rest.length > 0) client.write(rest);
      splice(client, broker);
      client.resume();
    };
    broker.on("data", onData);
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(listen.port, listen.host, () => {
      server.off("error", reject);
      resolve(server);
    });
  });
}
