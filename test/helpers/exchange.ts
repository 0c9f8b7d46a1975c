// Exchanges for the unit tests of request stages: a real Runtime built from a rule-file snippet
// (placeholders derived from a key made for the test), and one request's state as the broker
// builds it before the first stage. The request is a readable stream of its body; nothing
// listens on a socket.
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { expect } from "vitest";
import type { Exchange, Mode } from "../../proxy/exchange.js";
import { forwardableRequestHeaders } from "../../proxy/headers.js";
import { exchangeFor } from "../../proxy/listener/exchange-for.js";
import { Runtime } from "../../proxy/runtime.js";
import { PoolState } from "../../secrets/pool.js";
import { createSecretResolver } from "../../secrets/sources.js";
import { parseSnippet } from "./rules.js";

/** A runtime from `yaml` (after `version: 1`), its secrets read from `env` only. */
export function testRuntime(yaml: string, env: Record<string, string> = {}): Promise<Runtime> {
  const rules = parseSnippet(yaml);
  const resolver = createSecretResolver(rules, { env, home: tmpdir(), cwd: tmpdir(), warn: () => {} });
  return Runtime.build(rules, resolver, randomBytes(32));
}

/**
 * One pool store for each test file's exchanges, in a home of its own (marks stay in memory):
 * the files a worker runs one after the other share this module (vitest.config.ts), not marks.
 */
const pools = new Map<string | undefined, PoolState>();
function testPools(): PoolState {
  const file = expect.getState().testPath;
  let store = pools.get(file);
  if (store === undefined) {
    store = new PoolState(mkdtempSync(join(tmpdir(), "kb-stage-")));
    pools.set(file, store);
  }
  return store;
}

export interface RequestInit {
  readonly mode?: Mode;
  readonly method?: string;
  readonly host: string;
  readonly port?: number;
  readonly path?: string;
  /** As the client sent them, names in any case; `host` defaults to the target's. */
  readonly headers?: Record<string, string>;
  readonly body?: string;
  readonly sni?: string;
  readonly client?: string;
}

/**
 * One request bound for `init.host`, in the state the broker builds before its stages run: the
 * provider is not matched yet (matchProvider does it) unless `mode` is reverse.
 */
export function testExchange(rt: Runtime, init: RequestInit): Exchange {
  const mode = init.mode ?? "intercept";
  const port = init.port ?? (mode === "plain" ? 80 : 443);
  const sent: Record<string, string> = {
    host: port === 443 || port === 80 ? init.host : `${init.host}:${port}`,
    ...(init.body === undefined ? {} : { "content-length": String(Buffer.byteLength(init.body)) }),
  };
  for (const [name, value] of Object.entries(init.headers ?? {})) {
    delete sent[name.toLowerCase()];
    sent[name] = value;
  }
  const rawHeaders = Object.entries(sent).flat();
  const req = Readable.from(
    init.body === undefined ? [] : [Buffer.from(init.body)],
  ) as unknown as IncomingMessage;
  Object.assign(req, {
    method: init.method ?? "GET",
    url: init.path ?? "/",
    rawHeaders,
    headers: Object.fromEntries(Object.entries(sent).map(([k, v]) => [k.toLowerCase(), v])),
  });
  const client = rt.clients.get(init.client ?? "default");
  if (client === undefined) throw new Error(`no client ${init.client} in the test rules`);
  const provider = mode === "reverse" ? rt.providerForHost(init.host, port) : undefined;
  const target = {
    mode,
    client,
    host: init.host,
    port,
    scheme: mode === "plain" ? ("http" as const) : ("https" as const),
    sni: init.sni ?? (mode === "intercept" ? init.host : undefined),
    path: init.path ?? "/",
    provider,
  };
  const headers = forwardableRequestHeaders(rawHeaders, undefined);
  // The broker's own starting literal (listener/exchange-for.ts), so a test exchange has its shape.
  return exchangeFor(req, {} as ServerResponse, init.method ?? "GET", headers, target, rt, testPools());
}

/** The header's value as it would go upstream (the last one set). */
export function sentHeader(x: Exchange, name: string): string | undefined {
  let value: string | undefined;
  for (let i = 0; i < x.headers.length; i += 2) if (x.headers[i] === name) value = x.headers[i + 1];
  return value;
}
