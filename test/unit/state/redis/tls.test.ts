// What a broker says when TLS to its fleet's Redis fails (state/redis/tls.ts, errors.ts): real TLS
// handshakes on loopback against a server signed by another CA, one whose certificate names
// another host, and a plain TCP server, each error read as ioredis passes it on.
import { once } from "node:events";
import { createServer as createTcpServer, type Server } from "node:net";
import { type ConnectionOptions, connect, createServer } from "node:tls";
import { afterAll, describe, expect, it } from "vitest";
import { loadOrCreateCa } from "../../../../certs/ca.js";
import { LeafMinter } from "../../../../certs/leaf.js";
import { redisErrorText } from "../../../../state/redis/errors.js";
import { redisTls } from "../../../../state/redis/tls.js";
import { tempHome } from "../../../helpers/broker.js";

const ca = loadOrCreateCa(tempHome());
const minter = new LeafMinter(ca);
const servers: Server[] = [];

async function listen(server: Server): Promise<number> {
  servers.push(server);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return (server.address() as { port: number }).port;
}

function tlsServer(host: string): Server {
  const leaf = minter.mint(host);
  return createServer({ cert: leaf.certPem, key: leaf.keyPem }, (s) => s.end());
}

/** The error of one handshake, as ioredis connects (its `tls` option spread into tls.connect). */
async function handshakeError(port: number, tls: ConnectionOptions): Promise<Error> {
  const socket = connect({ host: "127.0.0.1", port, ...tls });
  const [err] = (await once(socket, "error").catch((e: Error) => [e])) as [Error];
  socket.destroy();
  return err;
}

afterAll(() => {
  for (const s of servers) s.close();
});

describe("rediss:// errors", () => {
  it("a server signed by a CA not in upstream_ca: says to add that CA", async () => {
    const port = await listen(tlsServer("127.0.0.1"));
    const { tls } = redisTls({ url: `rediss://127.0.0.1:${port}`, prefix: "kb:" });
    const text = redisErrorText(await handshakeError(port, tls!));
    expect(text).toMatch(
      /^the Redis server's TLS certificate is not trusted \(.+\): add the CA that signed it/,
    );
  });

  it("trusted once the CA is listed; a certificate for another host is named as such", async () => {
    const good = await listen(tlsServer("127.0.0.1"));
    const config = {
      url: `rediss://127.0.0.1:${good}`,
      prefix: "kb:",
      ca: [ca.certPath],
    };
    const socket = connect({ host: "127.0.0.1", port: good, ...redisTls(config).tls });
    await once(socket, "secureConnect");
    expect(socket.authorized).toBe(true);
    socket.destroy();
    const other = await listen(tlsServer("cache.other.test"));
    const text = redisErrorText(await handshakeError(other, redisTls(config).tls!));
    expect(text).toMatch(/does not name the host of state\.url/);
  });

  it("rediss:// to a plain port says to use redis://; redis:// gets no TLS at all", async () => {
    const port = await listen(createTcpServer((s) => s.end("-ERR unknown command\r\n")));
    const { tls } = redisTls({ url: `rediss://127.0.0.1:${port}`, prefix: "kb:" });
    expect(redisErrorText(await handshakeError(port, tls!))).toMatch(
      /^the server does not speak TLS there \([^\n]+\): use redis:\/\//,
    );
    expect(redisTls({ url: "redis://127.0.0.1:6379", prefix: "kb:" })).toEqual({});
  });
});
