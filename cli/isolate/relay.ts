// What carries an isolated agent's connections to the broker (decision 115). The listeners live
// in the launch's network namespace (made there by cli/isolate/jail.ts) but are handed to `run`
// outside, which accepts on them: `run`'s own broker serves each connection in-process, with no
// relay at all; a running broker listens inside itself (decision 139) and gets a connection over
// one TCP connection from here only when it could not. `--allow-connect host:port`
// connections open the broker's CONNECT tunnel to that one destination, then pass bytes.
import type { Socket } from "node:net";

/** Pipes two sockets into each other; either side closing or failing ends both. */
export function splice(a: Socket, b: Socket): void {
  a.setNoDelay(true);
  b.setNoDelay(true);
  const end = () => {
    a.destroy();
    b.destroy();
  };
  a.on("error", end).on("close", end);
  b.on("error", end).on("close", end);
  a.pipe(b);
  b.pipe(a);
}

/** The most a proxy's answer to CONNECT may take before the tunnel's bytes start. */
const MAX_CONNECT_ANSWER = 16 * 1024;

/**
 * Asks the broker (on `broker`, a new connection to it) for a CONNECT tunnel to `target`
 * (`host:port`) with `authorization` (a Proxy-Authorization value), then passes the bytes of
 * `client` through it. A refused tunnel closes the connection: the agent's client sees the
 * destination hang up, and the broker's audit log says why.
 */
export function connectThrough(client: Socket, broker: Socket, target: string, authorization: string): void {
  client.pause();
  client.on("error", () => client.destroy());
  broker.on("error", () => {
    broker.destroy();
    client.destroy();
  });
  broker.write(
    `CONNECT ${target} HTTP/1.1\r\nhost: ${target}\r\nproxy-authorization: ${authorization}\r\n\r\n`,
  );
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
}
