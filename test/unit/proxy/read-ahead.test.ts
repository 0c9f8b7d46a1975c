// withoutReadAhead (decision 201): a socket keeps reading without node's read-ahead turn, under
// backpressure too; a stream that makes its data when asked is left alone, because without the
// turn it would stop after its first piece.
import { once } from "node:events";
import { createServer, connect as netConnect, type Socket } from "node:net";
import { Readable, Writable } from "node:stream";
import { expect, it } from "vitest";
import { withoutReadAhead } from "../../../proxy/upstream-h1-wire.js";

it("leaves a stream that makes its data when asked as it is: every piece still comes", {
  timeout: 5000,
}, async () => {
  let n = 0;
  const pulled = new Readable({
    read() {
      setTimeout(() => this.push(n < 5 ? Buffer.from(`piece ${n++};`) : null), 1);
    },
  });
  withoutReadAhead(pulled);
  const got: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      got.push(String(chunk));
      done();
    },
  });
  pulled.pipe(sink);
  await once(sink, "finish");
  expect(got.join("")).toBe("piece 0;piece 1;piece 2;piece 3;piece 4;");
});

it("a socket without the turn reads on, through a reader that stops and starts", async () => {
  const size = 8 * 1024 * 1024;
  const server = createServer((s) => {
    s.end(Buffer.alloc(size, 0x61));
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as { port: number };
  const socket: Socket = netConnect(port, "127.0.0.1");
  withoutReadAhead(socket);
  expect((socket as unknown as { _readableState: { readingMore: boolean } })._readableState.readingMore).toBe(
    true,
  );
  let received = 0;
  let pauses = 0;
  socket.on("data", (chunk: Buffer) => {
    received += chunk.length;
    // A slow reader now and then: the socket's buffer fills, its handle stops, and it must start
    // again when the reader comes back.
    if (pauses < 20 && received > (pauses + 1) * (size / 25)) {
      pauses++;
      socket.pause();
      setTimeout(() => socket.resume(), 5);
    }
  });
  await once(socket, "end");
  server.close();
  expect(pauses).toBe(20);
  expect(received).toBe(size);
});
