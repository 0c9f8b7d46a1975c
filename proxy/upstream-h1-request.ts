// One request of the HTTP/1.1 upstream client (upstream-h1.ts, decision 188) on a connection
// (upstream-h1-conn.ts), and the controller its handler is given: abort, pause and resume, and
// the request body as it streams to the connection.
import type { Socket } from "node:net";
import type { Readable } from "node:stream";
import type { Dispatcher } from "undici";
import type { H2DispatchOptions } from "./upstream-h2.js";

/** What a request needs of its connection. */
export interface H1Link {
  readonly socket: Socket;
  kill(): void;
  /** Stops handing the answer's bytes over (the socket keeps them). */
  pause(): void;
  /** Goes on handing them over. */
  read(): void;
  touch(): void;
}

const CRLF = Buffer.from("\r\n", "latin1");
const ignore = () => {};

/** One request on one connection; also the controller its handler is given. */
export class H1Request {
  aborted = false;
  paused = false;
  reason: Error | null = null;
  /** The answer ended or failed: nothing more goes to the handler. */
  settled = false;
  /** The whole request has been written. */
  written = false;
  head = false;
  conn: H1Link | undefined;
  body: Readable | undefined;

  constructor(
    readonly o: H2DispatchOptions,
    readonly handler: Dispatcher.DispatchHandler,
  ) {}

  abort(reason: Error): void {
    if (this.aborted || this.settled) return;
    this.aborted = true;
    this.reason = reason;
    this.conn?.kill();
    this.fail(reason);
  }

  pause(): void {
    this.paused = true;
    this.conn?.pause();
  }

  resume(): void {
    this.paused = false;
    this.conn?.read();
  }

  fail(err: Error): void {
    if (this.settled) return;
    this.settled = true;
    this.stopBody();
    this.handler.onResponseError?.(this as unknown as Dispatcher.DispatchController, err);
  }

  stopBody(): void {
    const body = this.body;
    if (body === undefined) return;
    this.body = undefined;
    body.off("data", this.onBodyData!);
    body.off("end", this.onBodyEnd!);
    body.off("error", this.onBodyError!);
    // A body stage may still fail it (a placeholder further on): nobody listens any more.
    body.on("error", ignore);
    this.conn?.socket.off("drain", this.onDrain!);
    // What the upstream did not wait for is read and dropped, so the client's connection
    // is not left with a paused request.
    if (!this.written) body.resume();
  }

  /** Streams a request body: paused while the socket's buffer is full. */
  sendBody(body: Readable, chunked: boolean, declared: number | undefined): void {
    this.body = body;
    let sent = 0;
    const socket = this.conn!.socket;
    this.onBodyData = (chunk: Buffer) => {
      sent += chunk.length;
      this.conn?.touch();
      if (declared !== undefined && sent > declared) {
        this.abort(
          Object.assign(new Error("the request body is longer than its content-length"), {
            code: "UND_ERR_REQ_CONTENT_LENGTH_MISMATCH",
          }),
        );
        return;
      }
      if (chunk.length === 0) return;
      const ok = socket.write(
        chunked
          ? Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`, "latin1"), chunk, CRLF])
          : chunk,
      );
      if (!ok && !waiting) {
        waiting = true;
        body.pause();
        socket.once("drain", this.onDrain!);
      }
    };
    let waiting = false;
    this.onDrain = () => {
      waiting = false;
      body.resume();
    };
    this.onBodyEnd = () => {
      if (declared !== undefined && sent !== declared) {
        this.abort(
          Object.assign(new Error("the request body is shorter than its content-length"), {
            code: "UND_ERR_REQ_CONTENT_LENGTH_MISMATCH",
          }),
        );
        return;
      }
      if (chunked) socket.write("0\r\n\r\n", "latin1");
      this.written = true;
      this.stopBody();
    };
    this.onBodyError = () => this.abort(new Error("the request body failed"));
    body.on("data", this.onBodyData);
    body.on("end", this.onBodyEnd);
    body.on("error", this.onBodyError);
  }

  // Set by sendBody: a request whose body is in memory allocates none of them.
  onBodyData: ((chunk: Buffer) => void) | undefined;
  onBodyEnd: (() => void) | undefined;
  onBodyError: (() => void) | undefined;
  onDrain: (() => void) | undefined;
}
