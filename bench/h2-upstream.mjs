// The HTTP/2 bench's upstream, in its own process: HTTP/2 and HTTP/1.1 on one TLS port (ALPN),
// a small JSON answer on any path, and a gRPC method (`/bench.B/Unary` and `/bench.B/Stream`)
// framed by hand, each checking it got exactly the real key. Prints {"port":N} when ready.
import http2 from "node:http2";

const { cert, key, realKey } = JSON.parse(process.argv[2]);
const fs = await import("node:fs");
const server = http2.createSecureServer({
  cert: fs.readFileSync(cert),
  key: fs.readFileSync(key),
  allowHTTP1: true,
  settings: { maxConcurrentStreams: 1000 },
});
const body = JSON.stringify({ id: "bench", choices: [{ message: { content: "ok" } }] });
const frame = (payload) => {
  const b = Buffer.from(payload);
  const out = Buffer.alloc(5 + b.length);
  out.writeUInt32BE(b.length, 1);
  b.copy(out, 5);
  return out;
};
const reply = frame(JSON.stringify({ ok: true }));
server.on("request", (req, res) => {
  const auth = req.headers.authorization;
  if (auth !== realKey) {
    res.writeHead(401);
    res.end();
    return;
  }
  req.resume();
  req.on("end", () => {
    if (req.url === "/bench.B/Unary" || req.url === "/bench.B/Stream") {
      const n = req.url.endsWith("Stream") ? 10_000 : 1;
      res.writeHead(200, { "content-type": "application/grpc" });
      let i = 0;
      const pump = () => {
        while (i < n) {
          i++;
          if (!res.write(reply)) {
            res.once("drain", pump);
            return;
          }
        }
        res.addTrailers({ "grpc-status": "0" });
        res.end();
      };
      pump();
      return;
    }
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
  });
});
server.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ port: server.address().port })));
