// The model APIs the coding agents speak, served by the fake upstream (upstream.ts) in their real
// wire formats: Anthropic Messages (JSON and SSE), OpenAI Responses (SSE, and WebSocket as Codex
// uses it), OpenAI Chat Completions (JSON and SSE), Gemini generateContent and
// streamGenerateContent (JSON array, or SSE with `alt=sse`). Each API answers with its own fixed
// text, so a test knows which API an agent's printed answer came from.
import { createHash } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { FakeUpstream } from "./upstream.js";

export const ANSWERS = {
  messages: "Answer-from-the-fake-Anthropic-Messages-API",
  responses: "Answer-from-the-fake-OpenAI-Responses-API",
  chat: "Answer-from-the-fake-OpenAI-Chat-Completions-API",
  gemini: "Answer-from-the-fake-Gemini-API",
} as const;

export type Json = Record<string, unknown>;

export function parse(body: Buffer): Json {
  try {
    return JSON.parse(body.toString("utf8")) as Json;
  } catch {
    return {};
  }
}

export function json(res: ServerResponse, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

/** Server-sent events: `[event name or undefined, data]` pairs, then the end of the response. */
export function sse(res: ServerResponse, events: [string | undefined, unknown][]): void {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  for (const [name, data] of events) {
    const text = typeof data === "string" ? data : JSON.stringify(data);
    res.write(`${name === undefined ? "" : `event: ${name}\n`}data: ${text}\n\n`);
  }
  res.end();
}

function messagesEvents(model: string): [string, Json][] {
  const message = {
    id: "msg_fake",
    type: "message",
    role: "assistant",
    model,
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage: { input_tokens: 5, output_tokens: 1 },
  };
  return [
    ["message_start", { type: "message_start", message }],
    [
      "content_block_start",
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    ],
    [
      "content_block_delta",
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: ANSWERS.messages } },
    ],
    ["content_block_stop", { type: "content_block_stop", index: 0 }],
    [
      "message_delta",
      {
        type: "message_delta",
        delta: { stop_reason: "end_turn", stop_sequence: null },
        usage: { output_tokens: 5 },
      },
    ],
    ["message_stop", { type: "message_stop" }],
  ];
}

export function anthropicMessages(_req: IncomingMessage, res: ServerResponse, body: Buffer): void {
  const request = parse(body);
  const model = String(request.model ?? "claude-fake");
  if (request.stream === true) {
    sse(res, messagesEvents(model));
    return;
  }
  json(res, {
    id: "msg_fake",
    type: "message",
    role: "assistant",
    model,
    content: [{ type: "text", text: ANSWERS.messages }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 5, output_tokens: 5 },
  });
}

/** The Responses API's streaming events for one text answer (SSE event names = their `type`). */
function responsesEvents(model: string): Json[] {
  const base = { id: "resp_fake", object: "response", created_at: 1_700_000_000, model };
  const text = ANSWERS.responses;
  const part = { type: "output_text", text, annotations: [] };
  const item = { id: "msg_fake", type: "message", status: "completed", role: "assistant", content: [part] };
  const usage = {
    input_tokens: 5,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: 5,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 10,
  };
  const at = { item_id: "msg_fake", output_index: 0, content_index: 0 };
  const events: Json[] = [
    { type: "response.created", response: { ...base, status: "in_progress", output: [] } },
    { type: "response.in_progress", response: { ...base, status: "in_progress", output: [] } },
    {
      type: "response.output_item.added",
      output_index: 0,
      item: { ...item, status: "in_progress", content: [] },
    },
    { type: "response.content_part.added", ...at, part: { ...part, text: "" } },
    { type: "response.output_text.delta", ...at, delta: text },
    { type: "response.output_text.done", ...at, text },
    { type: "response.content_part.done", ...at, part },
    { type: "response.output_item.done", output_index: 0, item },
    { type: "response.completed", response: { ...base, status: "completed", output: [item], usage } },
  ];
  return events.map((e, i) => ({ ...e, sequence_number: i }));
}

export function responses(_req: IncomingMessage, res: ServerResponse, body: Buffer): void {
  const model = String(parse(body).model ?? "gpt-fake");
  sse(
    res,
    responsesEvents(model).map((e) => [String(e.type), e]),
  );
}

function chat(_req: IncomingMessage, res: ServerResponse, body: Buffer): void {
  const request = parse(body);
  const model = String(request.model ?? "gpt-fake");
  const base = { id: "chatcmpl-fake", created: 1_700_000_000, model };
  const usage = { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 };
  if (request.stream !== true) {
    json(res, {
      ...base,
      object: "chat.completion",
      choices: [{ index: 0, message: { role: "assistant", content: ANSWERS.chat }, finish_reason: "stop" }],
      usage,
    });
    return;
  }
  const chunk = (choice: Json, extra: Json = {}) => ({
    ...base,
    object: "chat.completion.chunk",
    choices: [{ index: 0, ...choice }],
    ...extra,
  });
  sse(res, [
    [undefined, chunk({ delta: { role: "assistant", content: ANSWERS.chat }, finish_reason: null })],
    [undefined, chunk({ delta: {}, finish_reason: "stop" }, { usage })],
    [undefined, "[DONE]"],
  ]);
}

/** A value of a JSON schema's shape (Gemini's upper-case types too): what structured output returns. */
function instanceOf(schema: Json | undefined): unknown {
  const type = String(schema?.type ?? "").toLowerCase();
  if (type === "object") {
    const properties = (schema?.properties ?? {}) as Record<string, Json>;
    return Object.fromEntries(Object.entries(properties).map(([name, sub]) => [name, instanceOf(sub)]));
  }
  if (type === "array") return [];
  if (type === "integer" || type === "number") return 1;
  if (type === "boolean") return false;
  return ANSWERS.gemini;
}

/** A generateContent answer to `request` (its generationConfig decides text or JSON). */
export function geminiAnswer(request: Json, model: string): Json {
  // Structured output (Gemini CLI rates each prompt with a small model first): JSON of the schema.
  const config = (request.generationConfig ?? {}) as Json;
  const schema = (config.responseJsonSchema ?? config.responseSchema) as Json | undefined;
  const text =
    config.responseMimeType === "application/json" ? JSON.stringify(instanceOf(schema)) : ANSWERS.gemini;
  return {
    candidates: [{ content: { role: "model", parts: [{ text }] }, finishReason: "STOP", index: 0 }],
    usageMetadata: { promptTokenCount: 5, candidatesTokenCount: 5, totalTokenCount: 10 },
    modelVersion: model,
  };
}

function gemini(req: IncomingMessage, res: ServerResponse, body: Buffer): void {
  const url = new URL(req.url ?? "/", "https://generativelanguage.googleapis.com");
  const model = /\/models\/([^/:]+):/.exec(url.pathname)?.[1] ?? "gemini-fake";
  const answer = geminiAnswer(parse(body), model);
  if (!url.pathname.endsWith(":streamGenerateContent")) {
    json(res, answer);
    return;
  }
  if (url.searchParams.get("alt") === "sse") {
    sse(res, [[undefined, answer]]);
    return;
  }
  json(res, [answer]);
}

/** One unmasked server frame (text or close). */
function frame(opcode: number, payload: Buffer): Buffer {
  const len = payload.length;
  const head =
    len < 126
      ? Buffer.from([0x80 | opcode, len])
      : len < 65_536
        ? Buffer.from([0x80 | opcode, 126, len >> 8, len & 0xff])
        : Buffer.concat([Buffer.from([0x80 | opcode, 127]), bigLength(len)]);
  return Buffer.concat([head, payload]);
}

function bigLength(len: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(len));
  return b;
}

/** Reads the client's (masked) frames off `socket`, calling `onText` for each text message. */
function readFrames(socket: Socket, onText: (text: string) => void, onClose: () => void): void {
  let buf = Buffer.alloc(0);
  let pieces: Buffer[] = [];
  socket.on("data", (chunk: Buffer) => {
    buf = Buffer.concat([buf, chunk]);
    for (;;) {
      if (buf.length < 2) return;
      const fin = (buf[0]! & 0x80) !== 0;
      const opcode = buf[0]! & 0x0f;
      const masked = (buf[1]! & 0x80) !== 0;
      let len = buf[1]! & 0x7f;
      let at = 2;
      if (len === 126) {
        if (buf.length < 4) return;
        len = buf.readUInt16BE(2);
        at = 4;
      } else if (len === 127) {
        if (buf.length < 10) return;
        len = Number(buf.readBigUInt64BE(2));
        at = 10;
      }
      const mask = masked ? buf.subarray(at, at + 4) : undefined;
      if (masked) at += 4;
      if (buf.length < at + len) return;
      const payload = Buffer.from(buf.subarray(at, at + len));
      if (mask !== undefined) for (let i = 0; i < payload.length; i++) payload[i]! ^= mask[i % 4]!;
      buf = buf.subarray(at + len);
      if (opcode === 0x8) {
        onClose();
        return;
      }
      if (opcode === 0x9) socket.write(frame(0xa, payload));
      if (opcode === 0x1 || opcode === 0x0) {
        pieces.push(payload);
        if (fin) {
          onText(Buffer.concat(pieces).toString("utf8"));
          pieces = [];
        }
      }
    }
  });
}

/** A message a client sent over a WebSocket, with the upgrade request's headers. */
export interface SocketMessage {
  readonly url: string;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly text: string;
}

/** The Responses API over WebSocket: each `response.create` message gets the events back. */
export function responsesSocket(req: IncomingMessage, socket: Socket, messages: SocketMessage[]): void {
  const accept = createHash("sha1")
    .update(`${req.headers["sec-websocket-key"]}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
    .digest("base64");
  socket.write(
    `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`,
  );
  socket.on("error", () => socket.destroy());
  readFrames(
    socket,
    (text) => {
      messages.push({ url: req.url ?? "", headers: { ...req.headers }, text });
      const message = parse(Buffer.from(text));
      if (message.type !== "response.create") return;
      for (const e of responsesEvents(String(message.model ?? "gpt-fake")))
        socket.write(frame(0x1, Buffer.from(JSON.stringify(e))));
    },
    () => socket.end(frame(0x8, Buffer.alloc(0))),
  );
}

/**
 * Serves the four APIs on `upstream`, for every model name (DeepSeek's Chat Completions has no
 * `/v1`). Returns the WebSocket messages received, which `upstream.received` does not hold.
 */
export function serveModelApis(upstream: FakeUpstream): SocketMessage[] {
  const messages: SocketMessage[] = [];
  upstream.routes.set("POST /v1/messages", anthropicMessages);
  upstream.routes.set("POST /v1/responses", responses);
  upstream.routes.set("POST /v1/chat/completions", chat);
  upstream.routes.set("POST /chat/completions", chat);
  for (const method of ["generateContent", "streamGenerateContent"])
    for (const version of ["v1beta", "v1"])
      upstream.routes.set(`POST /${version}/models/*:${method}`, gemini);
  upstream.upgrades.set("/v1/responses", (req, socket) => responsesSocket(req, socket, messages));
  return messages;
}
