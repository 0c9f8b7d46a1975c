// The command line's requests to a broker on this machine (its health check and admin API), made
// with node:http: a command that used fetch paid for loading undici, about a fifth of what a
// short command like `env` or `status` costs to run.
import { http } from "../core/node-http.js";

export interface LocalRequest {
  readonly method?: string;
  readonly headers?: Record<string, string>;
  readonly body?: string;
  /** For the whole exchange, the answer's body included. */
  readonly timeoutMs: number;
}

export interface LocalAnswer {
  readonly status: number;
  readonly ok: boolean;
  readonly text: string;
}

/** Answers larger than this are refused: the broker's are a few KiB. */
const MAX_ANSWER = 4 * 1024 * 1024;

/** An error after the answer's head arrived: something HTTP answered on the port. */
export class AnswerError extends Error {}

/**
 * Sends one request on a connection of its own and reads the whole answer. Rejects when nothing
 * answers, the answer is not HTTP, or the time is up; with an AnswerError when an answer began
 * but broke off, is too large, or switched protocols.
 */
export function localRequest(url: string, opts: LocalRequest): Promise<LocalAnswer> {
  return new Promise((resolve, reject) => {
    let answered = false;
    const broke = (err: Error) => reject(new AnswerError(`the answer from ${url} broke off: ${err.message}`));
    const req = http.request(
      url,
      {
        method: opts.method ?? "GET",
        headers: opts.headers,
        agent: false,
        signal: AbortSignal.timeout(opts.timeoutMs),
      },
      (res) => {
        answered = true;
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_ANSWER) {
            reject(new AnswerError(`the answer from ${url} is over ${MAX_ANSWER} bytes`));
            req.destroy();
          } else chunks.push(chunk);
        });
        res.on("end", () => {
          const status = res.statusCode ?? 0;
          resolve({
            status,
            ok: status >= 200 && status < 300,
            text: Buffer.concat(chunks).toString("utf8"),
          });
        });
        res.on("error", broke);
      },
    );
    // node answers a 101 with this event, and no other: without a listener nothing would settle.
    req.on("upgrade", (_res, socket) => {
      socket.destroy();
      reject(new AnswerError(`${url} switched protocols instead of answering`));
    });
    // After the answer began (a body cut short or timed out), the request's error says so.
    req.on("error", (err) => (answered ? broke(err) : reject(err)));
    // Whatever else ends the exchange before an answer (a later call is ignored).
    req.on("close", () => reject(new Error(`${url} closed the connection without an answer`)));
    req.end(opts.body);
  });
}
