// The fetch every OAuth request goes through: keybroker's own upstream agent (so `resolve`,
// `upstream_ca`, verification and the private-address rule apply), one time limit for the
// whole exchange, and a cap on the answer's size (docs/spec.md §8). An answer over the cap or late
// is an error naming the endpoint; nothing of it is returned.
import type { Dispatcher, fetch as UndiciFetch } from "undici";

export class OAuthEndpointError extends Error {
  override name = "OAuthEndpointError";
  /** A timeout, a refused connection or a 5xx: trying again later may work. */
  readonly transient: boolean;

  constructor(message: string, transient: boolean, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.transient = transient;
  }
}

export interface CappedFetchOptions {
  /** The upstream agent, asked on each request (the broker's changes on reload). */
  readonly dispatcher: Dispatcher | (() => Dispatcher);
  readonly maxBytes: number;
  readonly timeoutMs: number;
  /** Extra headers on every request (`oauth.token_headers`). */
  readonly headers?: Readonly<Record<string, string>>;
}

/** `https://idp.example/oauth/token` → `https://idp.example/oauth/token` without query. */
function endpointName(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return "the authorization server";
  }
}

export function cappedFetch(opts: CappedFetchOptions) {
  return async (url: string, init: RequestInit): Promise<Response> => {
    const endpoint = endpointName(url);
    const timeout = AbortSignal.timeout(opts.timeoutMs);
    const signal = init.signal ? AbortSignal.any([timeout, init.signal]) : timeout;
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((v, k) => {
      headers[k] = v;
    });
    for (const [k, v] of Object.entries(opts.headers ?? {})) headers[k] = v;
    const late = () =>
      new OAuthEndpointError(
        `${endpoint} did not answer within ${opts.timeoutMs} ms (oauth.token_timeout)`,
        true,
      );
    // Loaded on the first OAuth call: undici's index (fetch, WebSocket, ...) is several MiB a
    // broker without OAuth never needs (proxy/upstream.ts loads only its Agent).
    const { fetch: undiciFetch } = await import("undici");
    let res: Awaited<ReturnType<typeof UndiciFetch>>;
    try {
      res = await undiciFetch(url, {
        method: init.method ?? "GET",
        headers,
        body: init.body as string | URLSearchParams | null | undefined,
        redirect: "manual",
        signal,
        dispatcher: typeof opts.dispatcher === "function" ? opts.dispatcher() : opts.dispatcher,
      });
    } catch (err) {
      if (timeout.aborted) throw late();
      if (init.signal?.aborted) throw err;
      const refused = privateAddressRefusal(err);
      if (refused !== undefined) {
        // Say which change to the rules lets it through (decision 124).
        const u = new URL(url);
        const target = `${refused.host}:${u.port || (u.protocol === "http:" ? 80 : 443)}`;
        throw new OAuthEndpointError(
          `cannot reach ${endpoint}: ${refused.message}, refused — list "${target}" under resolve: (with its CA under upstream_ca: when it serves https), or set allow_private_upstream: true on the provider`,
          true,
          err,
        );
      }
      throw new OAuthEndpointError(
        `cannot reach ${endpoint}: ${(err as Error).cause ?? (err as Error).message}`,
        true,
        err,
      );
    }
    const declared = Number(res.headers.get("content-length") ?? Number.NaN);
    const tooBig = () =>
      new OAuthEndpointError(
        `${endpoint} answered more than ${opts.maxBytes} bytes (oauth.max_response_bytes); nothing was kept`,
        false,
      );
    if (declared > opts.maxBytes) {
      await res.body?.cancel().catch(() => {});
      throw tooBig();
    }
    const chunks: Uint8Array[] = [];
    let size = 0;
    try {
      for await (const chunk of res.body ?? []) {
        size += chunk.length;
        if (size > opts.maxBytes) throw tooBig();
        chunks.push(chunk);
      }
    } catch (err) {
      await res.body?.cancel().catch(() => {});
      if (err instanceof OAuthEndpointError) throw err;
      if (timeout.aborted) throw late();
      throw new OAuthEndpointError(`${endpoint} broke off its answer: ${(err as Error).message}`, true, err);
    }
    const empty = res.status === 204 || res.status === 205 || res.status === 304;
    return new Response(empty ? null : Buffer.concat(chunks), {
      status: res.status,
      statusText: res.statusText,
      headers: [...res.headers],
    });
  };
}

/** The upstream agent's refusal of a private address (proxy/upstream.ts), if that is the cause. */
function privateAddressRefusal(err: unknown): { host: string; message: string } | undefined {
  for (let e = err; e instanceof Error; e = e.cause) {
    const host = (e as { code?: unknown; host?: unknown }).host;
    if ((e as { code?: unknown }).code === "EKB_PRIVATE_ADDRESS" && typeof host === "string") {
      return { host, message: e.message };
    }
  }
  return undefined;
}
