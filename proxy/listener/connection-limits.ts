// How long each stage of a client connection may take and how many may be open (docs/spec.md §3.8),
// applied to the listener and to the internal server that reads intercepted connections.
// The TLS handshake's own timeout is in engine.ts, where the handshake happens.
import { readFileSync } from "node:fs";
import type { Server } from "node:http";
import type { Socket } from "node:net";
import type { Rules } from "../../rules/types.js";
import type { ConnectionCap } from "./connection-cap.js";

/** The cap when nothing else says: well under any fd limit a broker is likely to run with. */
export const MAX_DEFAULT_CONNECTIONS = 4096;
/** File descriptors kept for everything else: the audit log, state files, child processes. */
const RESERVED_FDS = 128;

/** The soft limit on open files of this process, from /proc (Linux); undefined elsewhere. */
export function softFileLimit(limits = "/proc/self/limits"): number | undefined {
  try {
    const line = readFileSync(limits, "utf8")
      .split("\n")
      .find((l) => l.startsWith("Max open files"));
    const soft = line?.slice("Max open files".length).trim().split(/\s+/)[0];
    return soft === undefined || soft === "unlimited" ? undefined : Number(soft) || undefined;
  } catch {
    return undefined;
  }
}

/**
 * `limits.connections` when the rule file does not set it. A client connection can cost two
 * descriptors (a tunnel's upstream socket, an upstream connection of its own), so the cap is at
 * most half of what the fd limit leaves after a reserve, and never above 4096.
 */
export function defaultConnectionLimit(fileLimit = softFileLimit()): number {
  if (fileLimit === undefined) return MAX_DEFAULT_CONNECTIONS;
  return Math.max(16, Math.min(MAX_DEFAULT_CONNECTIONS, Math.floor((fileLimit - RESERVED_FDS) / 2)));
}

export function connectionLimit(rules: Rules): number {
  return rules.limits.connections ?? defaultConnectionLimit();
}

/**
 * How often node looks for connections whose headers are late: its default (30 s) would let a
 * 1 s headers timeout run for 31 s. A quarter of the timeout, between 50 ms and 1 s; the check
 * walks only the connections that are reading headers.
 */
export function checkingIntervalMs(headersMs: number): number {
  return Math.min(1000, Math.max(50, Math.floor(headersMs / 4)));
}

/** Options for `http.createServer` that must be given at creation. */
export function serverOptions(rules: Rules) {
  return {
    headersTimeout: rules.timeouts.headersMs,
    keepAliveTimeout: rules.timeouts.keepAliveMs,
    // A request's body and its response may stream for as long as the upstream keeps talking.
    requestTimeout: 0,
    connectionsCheckingInterval: checkingIntervalMs(rules.timeouts.headersMs),
    // A request without Host gets the broker's own 400 (docs/spec.md §11), not node's bare one.
    requireHostHeader: false,
  };
}

/** Applies the timeouts and the cap of (reloaded) rules to the running servers. */
export function applyConnectionRules(outer: Server, inner: Server, rules: Rules, cap: ConnectionCap): void {
  for (const server of [outer, inner]) {
    server.headersTimeout = rules.timeouts.headersMs;
    server.keepAliveTimeout = rules.timeouts.keepAliveMs;
  }
  // Counted on the listener's sockets, which intercepted connections and tunnels keep open
  // beneath them (proxy/listener/connection-cap.ts: at the cap the oldest idle one makes room).
  cap.limit = connectionLimit(rules);
}

/**
 * Node enforces `headersTimeout` only on servers that listen: tracking starts on 'listening'.
 * The internal server never listens (connections are handed to it), so it is started here.
 */
export function trackConnections(inner: Server): void {
  inner.emit("listening");
}

/** Connections open at once that count as a surge worth giving memory back after. */
export const SURGE_CONNECTIONS = 512;
/** How long after a surge's connections closed the memory is given back: the closes come in a burst. */
const SETTLE_MS = 1000;

/**
 * Calls `release` once a surge of connections (at least `surge` open at once) has mostly closed
 * (three quarters of its peak), a second after the last close that got it there. Each
 * connection left JavaScript objects (sockets, parsers, timers) that grew V8's heap, and an idle
 * broker allocates too little to make V8 shrink it again by itself (decision 55).
 */
export function releaseAfterSurges(server: Server, release: () => void, surge = SURGE_CONNECTIONS): void {
  let open = 0;
  let peak = 0;
  let timer: NodeJS.Timeout | undefined;
  server.on("connection", (socket: Socket) => {
    open++;
    if (open > peak) peak = open;
    socket.on("close", () => {
      open--;
      if (peak < surge || open > peak / 4 || timer !== undefined) return;
      timer = setTimeout(() => {
        timer = undefined;
        peak = open;
        release();
      }, SETTLE_MS);
      timer.unref();
    });
  });
}
