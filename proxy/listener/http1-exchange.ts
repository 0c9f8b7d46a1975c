// An HTTP/1.1 request as the pipeline's exchange: node's request object and the response
// (h1-response.ts, or node's on a connection node's server reads) carry the body both ways, the
// target says where it goes.
import type { IncomingMessage } from "node:http";
import type { PoolState } from "../../secrets/pool.js";
import type { Exchange, ExchangeResponse } from "../exchange.js";
import { forwardableRequestHeaders, setHeader } from "../headers.js";
import type { Runtime } from "../runtime.js";
import { exchangeFor } from "./exchange-for.js";
import type { Target } from "./request-target.js";

export function http1Exchange(
  req: IncomingMessage,
  res: ExchangeResponse,
  t: Target,
  rt: Runtime,
  pools: PoolState,
): Exchange {
  const headers = forwardableRequestHeaders(req.rawHeaders, req.headers.connection);
  if (t.mode === "reverse") {
    // The loopback Host means nothing upstream.
    setHeader(headers, "host", t.port === 443 ? t.host : `${t.host}:${t.port}`);
  }
  return exchangeFor(req, res, req.method ?? "GET", headers, t, rt, pools);
}
