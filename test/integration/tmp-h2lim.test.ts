// An HTTP/2 provider allows a bounded number of concurrent streams per connection
// (SETTINGS_MAX_CONCURRENT_STREAMS, about 100 at the big providers). Streams past it are refused,
// so keybroker opens another connection to the origin when every session it has is full
// (decision 178): many long streams at once (an agent's SSE answers) all get through.
import { readFileSync } from "node:fs";
import type { ServerHttp2Stream } from "node:http2";
import { ProxyAgent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findSecrets, outputs, tempHome, writeConfig } from "../helpers/broker.js";
import { REAL_OPENAI } from "../helpers/fixture.js";
import { type H2Upstream, startH2Upstream } from "../helpers/h2-upstream.js";
import { type InProcessBroker, startInProcessBroker } from "../helpers/in-process.js";
import { agentPlaceholders, placeholderOf } from "../helpers/placeholders.js";

const LIMIT = 100;
const STREAMS = 400;

let h2: H2Upstream;
let broker: InProcessBroker;
let home: string;
let openai: string;
/** The upstream streams held open, ended by the test. */
const held: ServerHttp2Stream[] = [];

beforeAll(async () => {
  h2 = await startH2Upstream({ settings: { maxConcurrentStreams: LIMIT } });
  home = tempHome();
  const config = writeConfig(
    tempHome(),
    `version: 1
upstream_ca: [${JSON.stringify(h2.caPath)}]
resolve:
  "api.openai.com:443": "127.0.0.1:${h2.port}"
providers:
  openai:
    credentials: [OPENAI_API_KEY]
`,
  );
  broker = await startInProcessBroker({ home, config, env: { OPENAI_API_KEY: REAL_OPENAI } });
  openai = placeholderOf(agentPlaceholders(broker.broker.runtime, "default"), "openai");
  // An event stream that sends its first event and then stays open, as a model thinking.
  h2.routes.set("/v1/responses", (stream, headers) => {
    stream.respond({ ":status": 200, "content-type": "text/event-stream" });
    stream.write(`data: ${headers.authorization === `Bearer ${REAL_OPENAI}` ? "ok" : "wrong key"}\n\n`);
    held.push(stream);
  });
});

afterAll(async () => {
  await broker?.stop();
  await h2?.close();
  expect(findSecrets([REAL_OPENAI], [home], [...outputs, broker.stderr()])).toEqual([]);
});

describe("an HTTP/2 origin's limit on concurrent streams", () => {
  it(`${STREAMS} open event streams to an origin that allows ${LIMIT} per connection: each gets its answer`, async () => {
    const agent = new ProxyAgent({
      uri: broker.url,
      requestTls: { ca: readFileSync(broker.bundlePath, "utf8") },
    });
    try {
      const answers = await Promise.all(
        Array.from({ length: STREAMS }, async () => {
          const res = await request("https://api.openai.com/v1/responses", {
            method: "POST",
            dispatcher: agent,
            headers: { authorization: `Bearer ${openai}`, "content-type": "application/json" },
            body: "{}",
          });
          let text = "";
          const first = new Promise<string>((resolve) =>
            res.body.on("data", (c: Buffer) => {
              text += String(c);
              resolve(text);
            }),
          );
          const ended = new Promise<string>((resolve) => res.body.once("end", () => resolve(text)));
          return { status: res.statusCode, first: await first, ended };
        }),
      );
      expect(answers.map((a) => [a.status, a.first])).toEqual(
        Array.from({ length: STREAMS }, () => [200, "data: ok\n\n"]),
      );
      // Each connection carried at most LIMIT of them at once.
      expect(held).toHaveLength(STREAMS);
      const sessions = new Set(held.map((s) => s.session));
      expect(sessions.size).toBeGreaterThanOrEqual(Math.ceil(STREAMS / LIMIT));
      for (const s of sessions) expect(held.filter((x) => x.session === s).length).toBeLessThanOrEqual(LIMIT);
      for (const s of held) s.end("data: [DONE]\n\n");
      for (const a of answers) expect(await a.ended).toBe("data: ok\n\ndata: [DONE]\n\n");
    } finally {
      await agent.close();
    }
  });
});
