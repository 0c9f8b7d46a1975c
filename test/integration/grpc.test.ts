// gRPC through the intercept (docs/spec.md §13): a real @grpc/grpc-js client, through the broker by
// CONNECT (grpc_proxy) and the broker's CA, to a real grpc-js server over TLS. Unary and
// streaming calls, trailers and trailers-only answers, cancellation, flow control; the
// credential injected into each call's metadata and its echo scrubbed with every message's
// length prefix still true.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadOrCreateCa } from "../../certs/ca.js";
import { LeafMinter } from "../../certs/leaf.js";
import { findSecrets, outputs } from "../helpers/broker.js";
import { REAL_OPENAI } from "../helpers/fixture.js";
import { type InProcessBroker, startOpenAIBehind } from "../helpers/in-process.js";

type Msg = Record<string, unknown>;
const ser = (v: Msg) => Buffer.from(JSON.stringify(v));
const de = (b: Buffer) => JSON.parse(b.toString()) as Msg;
const method = (name: string, requestStream: boolean, responseStream: boolean) => ({
  path: `/test.Echo/${name}`,
  requestStream,
  responseStream,
  requestSerialize: ser,
  requestDeserialize: de,
  responseSerialize: ser,
  responseDeserialize: de,
});
const service = {
  Unary: method("Unary", false, false),
  Fail: method("Fail", false, false),
  Numbers: method("Numbers", false, true),
  Sum: method("Sum", true, false),
  Chat: method("Chat", true, true),
  Forever: method("Forever", false, true),
  Flood: method("Flood", false, true),
} as unknown as grpc.ServiceDefinition;
const EchoClient = grpc.makeGenericClientConstructor(service, "Echo");
type Client = InstanceType<typeof EchoClient> & Record<string, (...args: unknown[]) => unknown>;

const FLOOD_MESSAGES = 2048;
const FLOOD_SIZE = 16 * 1024;

let server: grpc.Server;
let broker: InProcessBroker;
let home: string;
let client: Client;
let placeholder: string;
let cancelled: Promise<void>;
let onCancelled: () => void;
/** Bytes the Flood call's server has handed to its connection so far. */
let floodWritten = 0;
let floodProgress: (() => void) | undefined;

function auth(): grpc.Metadata {
  const md = new grpc.Metadata();
  md.set("authorization", `Bearer ${placeholder}`);
  return md;
}

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), "kb-grpc-"));
  const ca = loadOrCreateCa(dir);
  const leaf = new LeafMinter(ca).mint("api.openai.com");
  cancelled = new Promise((resolve) => {
    onCancelled = resolve;
  });
  server = new grpc.Server();
  server.addService(service, {
    Unary(call: grpc.ServerUnaryCall<Msg, Msg>, cb: grpc.sendUnaryData<Msg>) {
      const seen = String(call.metadata.get("authorization")[0]);
      const head = new grpc.Metadata();
      head.set("x-echo", seen);
      call.sendMetadata(head);
      const trailer = new grpc.Metadata();
      trailer.set("x-echo-trailer", seen);
      cb(null, { seen, asked: call.request }, trailer);
    },
    Fail(_call: grpc.ServerUnaryCall<Msg, Msg>, cb: grpc.sendUnaryData<Msg>) {
      cb({ code: grpc.status.NOT_FOUND, details: "nothing here" });
    },
    Numbers(call: grpc.ServerWritableStream<Msg, Msg>) {
      for (let i = 0; i < Number(call.request.count); i++) call.write({ i });
      call.end();
    },
    Sum(call: grpc.ServerReadableStream<Msg, Msg>, cb: grpc.sendUnaryData<Msg>) {
      let sum = 0;
      call.on("data", (m: Msg) => {
        sum += Number(m.n);
      });
      call.on("end", () => cb(null, { sum }));
    },
    Chat(call: grpc.ServerDuplexStream<Msg, Msg>) {
      call.on("data", (m: Msg) => call.write({ back: m.say }));
      call.on("end", () => call.end());
    },
    Forever(call: grpc.ServerWritableStream<Msg, Msg>) {
      call.on("cancelled", () => onCancelled());
      call.write({ first: true });
    },
    Flood(call: grpc.ServerWritableStream<Msg, Msg>) {
      const body = "x".repeat(FLOOD_SIZE);
      let i = 0;
      const next = () => {
        if (i === FLOOD_MESSAGES) {
          call.end();
          return;
        }
        i++;
        call.write({ i, body }, () => {
          floodWritten += FLOOD_SIZE;
          floodProgress?.();
          next();
        });
      };
      next();
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(
      "127.0.0.1:0",
      grpc.ServerCredentials.createSsl(null, [
        { cert_chain: Buffer.from(leaf.certPem), private_key: Buffer.from(leaf.keyPem) },
      ]),
      (err, p) => (err ? reject(err) : resolve(p)),
    ),
  );
  ({ broker, home, placeholder } = await startOpenAIBehind({ caPath: ca.certPath, port }));
  // grpc-js finds its proxy in the environment when a channel is made.
  process.env.grpc_proxy = broker.url;
  try {
    client = new EchoClient(
      "api.openai.com:443",
      grpc.credentials.createSsl(readFileSync(broker.bundlePath)),
    ) as unknown as Client;
  } finally {
    delete process.env.grpc_proxy;
  }
});

afterAll(async () => {
  client?.close();
  server?.forceShutdown();
  await broker?.stop();
  expect(findSecrets([REAL_OPENAI], [home], [...outputs, broker.stderr()])).toEqual([]);
});

function unary(
  name: string,
  req: Msg,
): Promise<{ value?: Msg; err?: grpc.ServiceError; head: grpc.Metadata; trailer: grpc.Metadata }> {
  return new Promise((resolve) => {
    let head = new grpc.Metadata();
    let trailer = new grpc.Metadata();
    const call = client[name]!(req, auth(), (err: grpc.ServiceError | null, value?: Msg) =>
      setImmediate(() => resolve({ value, err: err ?? undefined, head, trailer })),
    ) as grpc.ClientUnaryCall;
    call.on("metadata", (m: grpc.Metadata) => {
      head = m;
    });
    call.on("status", (s: grpc.StatusObject) => {
      trailer = s.metadata;
    });
  });
}

describe("gRPC through the intercept", () => {
  it("unary: the call carries the real key; its echo comes back scrubbed in message, headers and trailers", async () => {
    const r = await unary("Unary", { q: "hi" });
    expect(r.err).toBeUndefined();
    expect(r.value?.asked).toEqual({ q: "hi" });
    // Replaced in place, fitted to the key's length, so the message's length prefix holds.
    expect(String(r.value?.seen)).not.toContain(REAL_OPENAI);
    expect(String(r.value?.seen)).toMatch(/^Bearer sk-kb-/);
    expect(String(r.head.get("x-echo")[0])).not.toContain(REAL_OPENAI);
    expect(String(r.trailer.get("x-echo-trailer")[0])).not.toContain(REAL_OPENAI);
  });

  it("passes an error status in a trailers-only answer", async () => {
    const r = await unary("Fail", {});
    expect(r.err?.code).toBe(grpc.status.NOT_FOUND);
    expect(r.err?.details).toBe("nothing here");
  });

  it("server streaming, client streaming and bidi calls", async () => {
    const numbers: number[] = [];
    await new Promise<void>((resolve, reject) => {
      const call = client.Numbers!({ count: 50 }, auth()) as grpc.ClientReadableStream<Msg>;
      call.on("data", (m: Msg) => numbers.push(Number(m.i)));
      call.on("error", reject);
      call.on("end", resolve);
    });
    expect(numbers).toEqual(Array.from({ length: 50 }, (_, i) => i));

    const sum = await new Promise<Msg>((resolve, reject) => {
      const call = client.Sum!(auth(), (err: grpc.ServiceError | null, v?: Msg) =>
        err ? reject(err) : resolve(v!),
      ) as grpc.ClientWritableStream<Msg>;
      for (let n = 1; n <= 10; n++) call.write({ n });
      call.end();
    });
    expect(sum).toEqual({ sum: 55 });

    const replies: unknown[] = [];
    await new Promise<void>((resolve, reject) => {
      const call = client.Chat!(auth()) as grpc.ClientDuplexStream<Msg, Msg>;
      let n = 0;
      call.on("data", (m: Msg) => {
        replies.push(m.back);
        n++;
        if (n < 5) call.write({ say: `m${n}` });
        else call.end();
      });
      call.on("error", reject);
      call.on("end", resolve);
      call.write({ say: "m0" });
    });
    expect(replies).toEqual(["m0", "m1", "m2", "m3", "m4"]);
  });

  it("a call the client cancels is cancelled upstream", async () => {
    const call = client.Forever!({}, auth()) as grpc.ClientReadableStream<Msg>;
    const status = new Promise<grpc.StatusObject>((resolve) => call.on("status", resolve));
    call.on("error", () => {});
    call.once("data", () => call.cancel());
    await cancelled;
    expect((await status).code).toBe(grpc.status.CANCELLED);
  });

  it("a slow reader holds the upstream back (bounded buffering) and then gets every message", async () => {
    const call = client.Flood!({}, auth()) as grpc.ClientReadableStream<Msg>;
    call.pause();
    // Resume once the server has got a few messages out: from then on, what it has handed off
    // minus what the client has read is what sits between them, in the broker among others.
    await new Promise<void>((resolve) => {
      floodProgress = () => {
        if (floodWritten >= 3 * FLOOD_SIZE) resolve();
      };
    });
    floodProgress = undefined;
    let read = 0;
    let inFlight = 0;
    const done = new Promise<grpc.StatusObject>((resolve) => call.on("status", resolve));
    call.on("data", () => {
      read += FLOOD_SIZE;
      inFlight = Math.max(inFlight, floodWritten - read);
    });
    call.on("error", () => {});
    call.resume();
    const status = await done;
    expect(status.code).toBe(grpc.status.OK);
    expect(read).toBe(FLOOD_MESSAGES * FLOOD_SIZE);
    // 32 MiB went through; never more than a few windows' worth was in between.
    expect(inFlight).toBeLessThan(4 * 1024 * 1024);
  });
});
