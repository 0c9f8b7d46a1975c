// A CONNECT: authenticated, then intercepted (a provider's host, or `intercept: all`) or
// tunnelled untouched to a public address (a private one only when `resolve:` or the provider
// allows it). A tunnel is audited once its outcome is known.
import { lookup } from "node:dns";
import type { IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import type { AuditEntry } from "../../audit/audit-log.js";
import type { LeafMinter } from "../../certs/leaf.js";
import { BrokerError, internalError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import type { BrokerMetrics } from "../../metrics/broker-metrics.js";
import type { Launches } from "../launches.js";
import { allowsPrivate } from "../oauth-agent.js";
import type { Runtime } from "../runtime.js";
import { parseHostHeader } from "../stages/check-host-binding.js";
import { isPrivateAddress } from "../upstream.js";
import { authenticate } from "./client-auth.js";
import { writeRawError } from "./client-errors.js";
import type { ConnectionCap } from "./connection-cap.js";
import { type InnerServers, intercept, tunnel } from "./engine.js";

export interface ConnectParts {
  readonly rt: Runtime;
  readonly launches: Launches;
  readonly log: Logger;
  readonly minter: LeafMinter;
  /** The servers intercepted requests are parsed by. */
  readonly inner: InnerServers;
  readonly cap: ConnectionCap;
  readonly metrics: BrokerMetrics;
  readonly audit: (entry: AuditEntry) => void;
}

export function onConnect(p: ConnectParts, req: IncomingMessage, socket: Socket, head: Buffer): void {
  socket.on("error", () => socket.destroy());
  const { rt, log } = p;
  let target: { host: string; port: number } | undefined;
  try {
    target = parseHostHeader(req.url ?? "", 443);
    if (target === undefined || !/:\d+$/.test(req.url ?? "")) {
      throw new BrokerError(
        "bad_request",
        `CONNECT needs a host:port target with a port from 1 to 65535, got "${(req.url ?? "").slice(0, 200)}"`,
      );
    }
    const client = authenticate(rt, p.launches, req.headers["proxy-authorization"], log);
    if (rt.intercepts(target.host, target.port) || rt.rules.intercept === "all") {
      intercept(
        socket,
        head,
        { ...target, client: client.rule.name, launch: client.launch?.id },
        p.minter,
        p.inner,
        rt.rules.timeouts.handshakeMs,
      );
      return;
    }
    const where = `${target.host}:${target.port}`;
    // Audited once the outcome is known: a tunnel that never opened is not "tunnelled". A
    // refused private address is a block; an unreachable target passed through and failed.
    const audit = (outcome?: BrokerError, refused = false) => {
      p.metrics.tunnel(client.rule.name, refused ? "blocked" : "passthrough", outcome?.status ?? 200);
      p.audit({
        decision: refused ? "blocked" : "passthrough",
        client: client.rule.name,
        launch: client.launch?.id,
        method: "CONNECT",
        host: where,
        status: outcome === undefined ? 200 : outcome.status,
        code: outcome?.code,
        reason: outcome === undefined ? "tunnelled" : `not tunnelled: ${outcome.message}`,
      });
    };
    const refuse = (err: BrokerError, refused = false) => {
      audit(err, refused);
      writeRawError(socket, err);
    };
    const dest = target;
    const mapped = rt.rules.resolve.get(where);
    const allowed = mapped !== undefined || allowsPrivate(rt.rules, target.host, target.port);
    const onTunnelError = (e: Error) => {
      log.debug({ target: where, err: (e as NodeJS.ErrnoException).code }, "tunnel target unreachable");
      refuse(new BrokerError("upstream_unreachable", `could not reach ${where}`));
    };
    const onTunnelled = () => {
      audit();
      // The client's first byte through the tunnel is its request (limits.connections).
      if (head.length > 0) p.cap.settled(socket);
      else socket.once("data", () => p.cap.settled(socket));
    };
    const idleMs = rt.rules.timeouts.tunnelIdleMs;
    if (mapped !== undefined) {
      tunnel(socket, head, mapped, idleMs, onTunnelError, onTunnelled);
      return;
    }
    // Resolve once and connect to that address, so the check and the connection agree.
    lookup(dest.host, (err, address) => {
      if (err || (!allowed && isPrivateAddress(address))) {
        const refused = !err;
        refuse(
          new BrokerError(
            "upstream_unreachable",
            refused ? `${where} is a loopback/private address; refused` : `could not resolve ${dest.host}`,
            refused ? { hint: `list "${where}" under resolve: to allow it` } : {},
          ),
          refused,
        );
        return;
      }
      tunnel(socket, head, { host: address, port: dest.port }, idleMs, onTunnelError, onTunnelled);
    });
  } catch (err) {
    writeRawError(socket, asBrokerError(err, log));
  }
}

/** A refusal as it is; anything else is a bug: logged with its stack, 500 to the client. */
export function asBrokerError(err: unknown, log: Logger): BrokerError {
  if (err instanceof BrokerError) return err;
  log.error({ err }, "internal error while handling a request");
  return internalError();
}
