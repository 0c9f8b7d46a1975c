// A request's exchange as the pipeline starts it, whatever carried the request (HTTP/1.1,
// an HTTP/2 stream): one literal, so every exchange has the same shape.
import type { PoolState } from "../../secrets/pool.js";
import type { Exchange, ExchangeRequest, ExchangeResponse } from "../exchange.js";
import type { HeaderList } from "../headers.js";
import type { Runtime } from "../runtime.js";
import type { Target } from "./request-target.js";

export function exchangeFor(
  req: ExchangeRequest,
  res: ExchangeResponse,
  method: string,
  headers: HeaderList,
  t: Target,
  rt: Runtime,
  pools: PoolState,
): Exchange {
  return {
    req,
    res,
    method,
    mode: t.mode,
    rt,
    client: t.client,
    host: t.host,
    port: t.port,
    scheme: t.scheme,
    sni: t.sni,
    path: t.path,
    headers,
    provider: t.provider,
    secret: undefined,
    placeholder: undefined,
    placeholderSeenAt: [],
    startedAt: performance.now(),
    pools,
    injection: undefined,
    body: undefined,
    reverseRest: t.reverseRest,
    tried: new Set(),
    upstreamMs: 0,
    heldMs: 0,
    result: undefined,
    status: 0,
    refusal: undefined,
    reauthorized: false,
    exhausted: undefined,
  };
}
