// GET /metrics on the broker's listener (docs/spec.md §18), in the Prometheus text format. Served to a
// program on this machine (a loopback peer that passes the listener's local-caller check), and
// to anyone else only with an owner or admin token as a bearer token: the home's admin token,
// or the token of a client whose role is owner or admin.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Registry } from "prom-client";
import type { Caller } from "../admin/callers.js";
import { BrokerError, errorResponse } from "../core/errors.js";
import type { BrokerMetrics } from "./broker-metrics.js";
import type { CredentialStateLabel } from "./registry.js";

export const METRICS_PATH = "/metrics";

export function isMetricsRequest(url: string): boolean {
  return url === METRICS_PATH || url.startsWith(`${METRICS_PATH}?`);
}

function isLoopbackAddress(address: string | undefined): boolean {
  if (address === undefined) return false;
  const v4 = address.startsWith("::ffff:") ? address.slice(7) : address;
  return v4.startsWith("127.") || address === "::1";
}

export interface MetricsEndpointOptions {
  readonly metrics: BrokerMetrics;
  /** Each provider's credentials and their states, as `status` shows them. */
  readonly credentials: () => readonly {
    readonly id: string;
    readonly credentials: readonly { readonly id: string; readonly state: CredentialStateLabel }[];
  }[];
  /** Who a request's bearer token belongs to (admin/callers.ts), or undefined. */
  readonly caller: (req: IncomingMessage) => Caller | undefined;
}

export class MetricsEndpoint {
  readonly #opts: MetricsEndpointOptions;
  /**
   * Made on the first scrape: a broker nobody scrapes collects nothing, and does not load
   * prom-client either (decision 171).
   */
  #registry: Registry | undefined;

  constructor(opts: MetricsEndpointOptions) {
    this.#opts = opts;
  }

  /**
   * Answers GET /metrics. `assertLocalCaller` is the listener's check that a tokenless request
   * comes from a local program and not a web page (it throws a BrokerError).
   */
  async handle(req: IncomingMessage, res: ServerResponse, assertLocalCaller: () => void): Promise<void> {
    try {
      this.#authorize(req, assertLocalCaller);
      if (req.method !== "GET" && req.method !== "HEAD") {
        throw new BrokerError("bad_request", `${req.method} ${METRICS_PATH} is not served`, {
          hint: `scrape it with GET ${METRICS_PATH}`,
        });
      }
      if (this.#registry === undefined) {
        const { createRegistry } = await import("./registry.js");
        // Two first scrapes at once both load it; the first to get here makes the registry.
        this.#registry ??= createRegistry(this.#opts.metrics, () =>
          this.#opts.credentials().map((p) => ({ provider: p.id, credentials: p.credentials })),
        );
      }
      const text = await this.#registry.metrics();
      res.writeHead(200, {
        "content-type": this.#registry.contentType,
        "content-length": Buffer.byteLength(text),
        "cache-control": "no-store",
      });
      res.end(req.method === "HEAD" ? undefined : text);
    } catch (err) {
      const out = errorResponse(
        err instanceof BrokerError ? err : new BrokerError("bad_request", "could not collect the metrics"),
      );
      res.writeHead(out.status, out.headers);
      res.end(out.body);
    }
  }

  #authorize(req: IncomingMessage, assertLocalCaller: () => void): void {
    const hint = "send Authorization: Bearer <the contents of admin.token in the broker's home>";
    if (req.headers.authorization !== undefined) {
      const caller = this.#opts.caller(req);
      if (caller?.role === "owner" || caller?.role === "admin") return;
      throw new BrokerError(
        "policy_denied",
        caller === undefined
          ? "the bearer token for /metrics is neither this broker's admin token nor a client's"
          : `${caller.by} has the role ${caller.role}; /metrics takes an owner or admin token`,
        { hint },
      );
    }
    if (!isLoopbackAddress(req.socket.remoteAddress)) {
      throw new BrokerError(
        "policy_denied",
        "/metrics answers programs on this machine; from elsewhere it needs the admin token or an owner or admin client's",
        { hint: `${hint} (in a Prometheus scrape config: authorization.credentials_file)` },
      );
    }
    assertLocalCaller();
  }
}
