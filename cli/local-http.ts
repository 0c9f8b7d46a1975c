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

/**
 * Sends one request on a connection of its own and reads the whole answer. Rejects when nothing
 * answers, the answer is not HTTP, it is too large, or the time is up.
 */
export function localRequest(url: string, opts: LocalRequest): Promise<LocalAnswer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      {
        method: opts.method ?? "GET",
        headers: opts.headers,
        agent: false,
        signal: AbortSignal.timeout(opts.timeoutMs),
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_ANSWER) req.destroy(new Error(`the answer from ${url} is over ${MAX_ANSWER} bytes`));
          else chunks.push(chunk);
        });
        res.on("end", () => {
          const status = res.statusCode ?? 0;
          resolve({
            status,
            ok: status >= 200 && status < 300,
            text: Buffer.concat(chunks).toString("utf8"),
          });
        });
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(opts.body);
  });
}
