// The one undici Agent that carries every request upstream: keep-alive pools per origin,
// verified TLS (system roots plus `upstream_ca`), the `resolve` map, and refusal of
// loopback/private addresses unless a rule allows them.
import { createHash } from "node:crypto";
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from "node:dns";
import { createRequire } from "node:module";
import { BlockList, isIP } from "node:net";
import { createSecureContext, type SecureContext } from "node:tls";
import type * as Undici from "undici";
import { trustedRoots } from "../certs/bundle.js";

// Only the parts of undici the broker uses: the Agent, the connector and the request API
// (`request`, `upgrade`), which undici's index adds to every dispatcher the same way. The index
// also loads fetch, WebSocket, the cache and the mock agents: several MiB of resident memory
// that a broker never uses.
const require = createRequire(import.meta.url);
const Agent = require("undici/lib/dispatcher/agent.js") as typeof Undici.Agent;
const buildConnector = require("undici/lib/core/connect.js") as typeof Undici.buildConnector;
Object.assign(
  (require("undici/lib/dispatcher/dispatcher.js") as { prototype: object }).prototype,
  require("undici/lib/api/index.js"),
);
type Agent = Undici.Agent;

const PRIVATE = new BlockList();
for (const [net, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const) {
  PRIVATE.addSubnet(net, prefix, "ipv4");
}
for (const [net, prefix] of [
  ["::", 128],
  ["::1", 128],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
] as const) {
  PRIVATE.addSubnet(net, prefix, "ipv6");
}

export function isPrivateAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return PRIVATE.check(address, "ipv4");
  if (family === 6) {
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
    if (mapped) return PRIVATE.check(mapped[1]!, "ipv4");
    return PRIVATE.check(address, "ipv6");
  }
  return false;
}

/** Raised when an upstream resolves to an address the rules do not allow. */
export class PrivateAddressError extends Error {
  readonly code = "EKB_PRIVATE_ADDRESS";
  constructor(
    readonly host: string,
    readonly address: string,
  ) {
    super(`${host} resolves to ${address}, a loopback/private address`);
  }
}

type LookupCallback = (
  err: NodeJS.ErrnoException | null,
  address: string | LookupAddress[],
  family?: number,
) => void;

function guardedLookup(hostname: string, options: LookupOptions, callback: LookupCallback): void {
  dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return callback(err, []);
    const bad = addresses.find((a) => isPrivateAddress(a.address));
    if (bad !== undefined) return callback(new PrivateAddressError(hostname, bad.address), []);
    if (options.all) return callback(null, addresses);
    const first = addresses[0];
    if (first === undefined)
      return callback(Object.assign(new Error(`no address for ${hostname}`), { code: "ENOTFOUND" }), []);
    callback(null, first.address, first.family);
  });
}

export interface UpstreamPolicy {
  /** `resolve` map: `host:port` → where to connect instead. Listed targets may be private. */
  resolve(host: string, port: number): { host: string; port: number } | undefined;
  /** A provider opted in to private upstream addresses for this host. */
  allowsPrivate(host: string, port: number): boolean;
}

export interface UpstreamOptions {
  readonly upstreamCa: readonly string[];
  /** `upstreamCa` read, shared by connectors made together; each reads its own without. */
  readonly trust?: UpstreamTrust;
  readonly policy: UpstreamPolicy;
  /** Idle time allowed before response headers and between body chunks. */
  readonly timeoutMs?: number;
}

type Connector = Undici.buildConnector.connector;

/** The last secure context made, by a digest of the roots it trusts. */
let lastContext: { digest: string; context: SecureContext } | undefined;

/**
 * What upstream TLS trusts: the system's roots and `upstream_ca`, read when made (a missing
 * file fails the start or the reload), and one secure context for every connection that uses
 * it (with a bare `ca` list, each connection would parse the ~150 system roots again). Parsing
 * them costs tens of milliseconds, so it is done at the first upstream connection rather than
 * at start, and once per process while the roots stay the same: a reload that leaves
 * `upstream_ca` alone keeps the context.
 */
export class UpstreamTrust {
  #roots: string[] | undefined;
  #context: SecureContext | undefined;

  constructor(upstreamCa: readonly string[]) {
    this.#roots = trustedRoots(upstreamCa);
  }

  get context(): SecureContext {
    if (this.#context !== undefined) return this.#context;
    const roots = this.#roots ?? [];
    const hash = createHash("sha256");
    for (const pem of roots) hash.update(`${pem.length}:`).update(pem);
    const digest = hash.digest("hex");
    if (lastContext?.digest !== digest) lastContext = { digest, context: createSecureContext({ ca: roots }) };
    this.#context = lastContext.context;
    this.#roots = undefined;
    return this.#context;
  }
}

/**
 * Opens upstream connections under the rules: verified TLS, the `resolve` map, and refusal of
 * private addresses. `h2` offers HTTP/2 by ALPN beside HTTP/1.1 (the origin probe and HTTP/2
 * sessions, upstream-router.ts); the Agent's own connections offer HTTP/1.1 only.
 */
export function createUpstreamConnector(opts: UpstreamOptions, h2 = false): Connector {
  const trust = opts.trust ?? new UpstreamTrust(opts.upstreamCa);
  let built: { strict: Connector; open: Connector } | undefined;
  const connectors = () => {
    if (built !== undefined) return built;
    const tls = {
      secureContext: trust.context,
      rejectUnauthorized: true,
      maxCachedSessions: 1000,
      allowH2: h2,
    };
    built = {
      strict: buildConnector({ ...tls, lookup: guardedLookup } as Undici.buildConnector.BuildOptions),
      open: buildConnector(tls),
    };
    return built;
  };
  return (options, callback) => {
    let strict: Connector;
    let open: Connector;
    try {
      ({ strict, open } = connectors());
    } catch (err) {
      // Made at the first connection, so it fails that connection, not the broker.
      return callback(err as Error, null);
    }
    const port = Number(options.port) || (options.protocol === "https:" ? 443 : 80);
    const servername = options.servername || (isIP(options.hostname) ? undefined : options.hostname);
    const mapped = opts.policy.resolve(options.hostname, port);
    if (mapped !== undefined) {
      return open(
        {
          ...options,
          hostname: mapped.host,
          port: String(mapped.port),
          ...(servername ? { servername } : {}),
        },
        callback,
      );
    }
    if (!opts.policy.allowsPrivate(options.hostname, port)) {
      if (isPrivateAddress(options.hostname.replace(/^\[|\]$/g, ""))) {
        return callback(new PrivateAddressError(options.hostname, options.hostname), null);
      }
      return strict(options, callback);
    }
    return open(options, callback);
  };
}

/** Something that may give a connection already open to `hostname:port` (the protocol probe's). */
export type Handoff = (hostname: string, port: number) => import("node:net").Socket | undefined;

/**
 * The connector of HTTP/1.1 upstream connections: `handoff` may give it a connection already
 * open to the origin (the protocol probe's, upstream-router.ts) before it opens one itself.
 */
export function handoffConnector(opts: UpstreamOptions, handoff?: Handoff): Connector {
  const connector = createUpstreamConnector(opts);
  return (options, callback) => {
    if (handoff !== undefined && options.protocol === "https:") {
      const socket = handoff(options.hostname, Number(options.port) || 443);
      // Answered on the next tick, as a new connection would be: the caller is still inside
      // the call that asked for it.
      if (socket !== undefined) return process.nextTick(callback, null, socket);
    }
    return connector(options, callback);
  };
}

/**
 * The Agent of upstream requests that are not the request path's own: WebSocket upgrades and
 * the OAuth and MCP calls (the request path's HTTP/1.1 is upstream-h1.ts).
 */
export function createUpstreamAgent(opts: UpstreamOptions, handoff?: Handoff): Agent {
  const timeout = opts.timeoutMs ?? 30 * 60_000;
  const connector = handoffConnector(opts, handoff);
  return new Agent({
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 600_000,
    headersTimeout: timeout,
    bodyTimeout: timeout,
    connect: connector,
  });
}
