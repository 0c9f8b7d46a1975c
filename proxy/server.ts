// The broker: one loopback listener that takes CONNECT (intercepted or tunnelled), plain-HTTP
// proxy requests, reverse-mode `/p/<provider>` requests and its own health endpoint.

import { lookup } from "node:dns";
import { createServer, type IncomingMessage, type Server, ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import type { Agent } from "undici";
import { ADMIN_PREFIX, handleAdmin, loadOrCreateAdminToken } from "../admin/api.js";
import { callerOf } from "../admin/callers.js";
import type { AdminHost } from "../admin/host.js";
import { auditLaunchEnded } from "../admin/launches-api.js";
import { AdminPage, isAdminPagePath } from "../admin/page.js";
import { Sessions } from "../admin/sessions.js";
import { providerStatuses } from "../admin/status.js";
import { answerTlsOnSamePort } from "../admin/tls.js";
import { Usage } from "../admin/usage.js";
import type { AuditDecision, AuditEntry, AuditHealth } from "../audit/audit-log.js";
import { AuditTrail } from "../audit/audit-trail.js";
import { writeTrustBundle } from "../certs/bundle.js";
import { type CertificateAuthority, loadOrCreateCa } from "../certs/ca.js";
import { LeafMinter } from "../certs/leaf.js";
import { removeBrokerRecord, writeBrokerRecord } from "../core/broker-records.js";
import { BrokerError, errorResponse, internalError } from "../core/errors.js";
import { homeKey, homePath } from "../core/home.js";
import type { Logger } from "../core/log.js";
import { Notifier } from "../core/notify.js";
import { knownSecrets } from "../core/scrub.js";
import { releaseHeap } from "../core/v8-tuning.js";
import { VERSION } from "../core/version.js";
import { BrokerMetrics } from "../metrics/broker-metrics.js";
import { isMetricsRequest, MetricsEndpoint } from "../metrics/endpoint.js";
import { isLoopbackHost } from "../rules/address.js";
import { normalizeHost } from "../rules/host-pattern.js";
import { kindOf } from "../rules/kinds/index.js";
import type { ProviderRule, Rules } from "../rules/types.js";
import { OAuthLogins } from "../secrets/oauth/logins.js";
import { bindingSecret, mcpClient } from "../secrets/oauth/mcp-login.js";
import { OAuthClient } from "../secrets/oauth/oauth-client.js";
import { Refresher } from "../secrets/oauth/refresher.js";
import { PoolState } from "../secrets/pool.js";
import { mayMark } from "../secrets/quota.js";
import { fingerprintOf } from "../secrets/secret.js";
import { createSecretResolver } from "../secrets/sources.js";
import { openSharedState, type SharedState } from "../state/shared-state.js";
import { accessLogFromEnv, logAccess } from "./access-log.js";
import { type ApprovalEvent, Approvals } from "./approvals.js";
import { bookkeep, fallBackBeforeSending, forwardWithPool, type PoolEvent } from "./bookkeep-pool.js";
import { answerClientErrors, writeRawError } from "./client-errors.js";
import { ConnectionCap } from "./connection-cap.js";
import {
  applyConnectionRules,
  connectionLimit,
  releaseAfterSurges,
  serverOptions,
  trackConnections,
} from "./connection-limits.js";
import { connectInfo, intercept, tunnel } from "./engine.js";
import type { Exchange, Mode } from "./exchange.js";
import type { ForwardResult } from "./forward.js";
import { forwardableRequestHeaders, setHeader } from "./headers.js";
import { Launches } from "./launches.js";
import { allowsPrivate } from "./oauth-agent.js";
import { requestStages, runStages, type Stage } from "./pipeline.js";
import { assertHostHeader, interceptedPath } from "./request-target.js";
import { type ClientState, type ProviderState, Runtime } from "./runtime.js";
import { parseHostHeader } from "./stages/check-host-binding.js";
import { Withdrawn } from "./stages/hold-for-approval.js";
import { labelFlag } from "./stages/pick-credential.js";
import { createUpstreamAgent, isPrivateAddress } from "./upstream.js";
import { createUpstreamAuth } from "./upstream-auth.js";
import { forwardUpgrade } from "./websocket.js";

export { VERSION };
export const HEALTH_PATH = "/__keybroker/health";

export interface BrokerOptions {
  readonly home: string;
  readonly rules: Rules;
  readonly log: Logger;
  /** The environment secrets are read from (default: this process's). */
  readonly env?: NodeJS.ProcessEnv;
  /** Overrides `listen`'s port (`--port`); 0 picks a free one. */
  readonly port?: number;
  /** Record the address in `$home/run/broker-<port>.json` so other commands find this broker. */
  readonly advertise?: boolean;
  /** Reloads the rule file as SIGHUP does (the admin page's "reload"). */
  readonly reloadRules?: () => Promise<void>;
}

/** Where a request is bound, worked out from how it reached the broker. */
interface Target {
  readonly mode: Mode;
  readonly client: ClientState;
  readonly host: string;
  readonly port: number;
  readonly scheme: "https" | "http";
  readonly path: string;
  readonly sni: string | undefined;
  readonly provider?: ProviderState;
  readonly reverseRest?: string;
}

export interface BrokerAddress {
  readonly host: string;
  readonly port: number;
  readonly url: string;
}

function sendError(res: ServerResponse, err: BrokerError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const out = errorResponse(err);
  if (err.code === "client_unauthorized") out.headers["proxy-authenticate"] = 'Basic realm="keybroker"';
  res.writeHead(out.status, out.headers);
  res.end(out.body);
}

function proxyCredentials(header: string | undefined): { user?: string; password?: string } {
  if (header === undefined || !/^basic /i.test(header)) return {};
  const decoded = Buffer.from(header.slice(6).trim(), "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  try {
    return colon === -1
      ? { user: decodeURIComponent(decoded) }
      : {
          user: decodeURIComponent(decoded.slice(0, colon)),
          password: decodeURIComponent(decoded.slice(colon + 1)),
        };
  } catch {
    throw new BrokerError("bad_request", "the Proxy-Authorization header has an invalid %-escape", {
      hint: "use the proxy URL that `keybroker env --client <name>` prints",
    });
  }
}

export class Broker implements AdminHost {
  readonly home: string;
  readonly ca: CertificateAuthority;
  readonly bundlePath: string;
  readonly log: Logger;
  #rt: Runtime;
  #agent: Agent;
  readonly #minter: LeafMinter;
  readonly #outer: Server;
  readonly #inner: Server;
  readonly #sockets = new Set<Socket>();
  /** limits.connections: at the cap, the oldest connection that has sent no request makes room. */
  readonly #cap: ConnectionCap;
  readonly #stages: readonly Stage[];
  readonly #opts: BrokerOptions;
  readonly #adminToken: string;
  readonly #adminPage: AdminPage;
  /** Off loopback: the admin page over TLS on the listener's port (admin/tls.ts). */
  readonly #adminTls: Server | undefined;
  /** Requests per client and provider over the last 24 h, for the admin page. */
  readonly usage = new Usage();
  /** `run --isolate` launches, each with its own client identity (decision 114). */
  readonly launches = new Launches();
  /** What /metrics reports (SPEC §18), counted as things happen. */
  readonly metrics = new BrokerMetrics();
  readonly #metricsEndpoint: MetricsEndpoint;
  readonly pools: PoolState;
  readonly #audit: AuditTrail | undefined;
  /** Requests held by `approve` rules until a person answers them (SPEC §16). */
  readonly approvals: Approvals;
  /** OAuth logins from the token store, followed as they change (SPEC §8). */
  readonly logins: OAuthLogins;
  readonly #refresher: Refresher;
  /** `notify: "cmd:…"`: told of events that need a person (SPEC §16). */
  readonly notifier: Notifier;
  /** Where marks and logins are shared: the home, or a fleet's Redis (SPEC §17). */
  readonly sharedState: SharedState;
  /** KEYBROKER_ACCESS_LOG, read once; the rule file's `log.access` is read per rule set. */
  readonly #accessLogEnv: boolean;
  #address: BrokerAddress | undefined;
  #reloadRejected: { at: Date; message: string } | undefined;
  readonly startedAt = new Date();

  private constructor(opts: BrokerOptions, ca: CertificateAuthority, rt: Runtime, shared: SharedState) {
    this.#opts = opts;
    this.#accessLogEnv = accessLogFromEnv(opts.env ?? process.env);
    this.home = opts.home;
    this.log = opts.log;
    this.ca = ca;
    this.bundlePath = writeTrustBundle(ca, opts.home);
    this.#minter = new LeafMinter(ca);
    this.#rt = rt;
    this.#agent = this.#createAgent(rt);
    this.notifier = new Notifier(rt.rules.notify, {
      warn: (message) => opts.log.warn(message),
      env: opts.env ?? process.env,
    });
    this.sharedState = shared;
    this.logins = new OAuthLogins(shared.tokens, {
      // A login replaced by a new `auth add` starts without the old one's marks.
      onReplaced: (provider, id) => this.pools.reset(provider, id),
      warn: (message) => opts.log.warn(message),
      onEvent: (decision, provider, credential, fingerprint) =>
        this.#audit?.record({
          decision,
          provider,
          credential,
          ...(fingerprint === undefined ? {} : { fingerprint }),
        }),
    });
    this.#refresher = this.#createRefresher();
    this.#setUpAuth(rt);
    this.approvals = new Approvals({
      onEvent: (e) => this.#onApprovalEvent(e),
      store: shared.approvals,
    });
    this.#stages = requestStages(opts.log, () => this.#audit?.writable ?? true, this.approvals);
    this.pools = new PoolState(opts.home, (message) => opts.log.warn(message));
    shared.attachPools(this.pools);
    shared.attachLogins(() => this.logins.all());
    const { audit } = rt.rules;
    this.#audit = audit.enabled
      ? new AuditTrail(opts.home, {
          maxBytes: audit.maxBytes,
          keep: audit.keep,
          scrub: (line) => knownSecrets.scrub(line),
          onError: (err) => opts.log.error(`audit log: ${err.message}`),
          onResume: (gap) =>
            opts.log.warn(
              gap === undefined
                ? "audit log: writing again"
                : `audit log: writing again; a gap line records ${gap.lost} event(s) lost from ${gap.first} to ${gap.last}`,
            ),
          onWarn: (message) => opts.log.warn(message),
        })
      : undefined;
    this.#adminToken = loadOrCreateAdminToken(opts.home);
    this.#metricsEndpoint = new MetricsEndpoint({
      metrics: this.metrics,
      credentials: () =>
        providerStatuses(this.#rt, this.pools.snapshot(), (id) =>
          this.logins.members(id).map((e) => e.login),
        ),
      caller: (req) => callerOf(this, this.#adminToken, req),
    });
    const options = serverOptions(rt.rules);
    this.#adminPage = new AdminPage(this, this.#adminToken, this.usage, new Sessions(shared.sessions));
    this.metrics.launches = () => this.launches.list();
    this.launches.onGone = (launch) => auditLaunchEnded(this, launch, "its run is gone");
    this.#outer = createServer(options, (req, res) => this.#onOuterRequest(req, res));
    if (!isLoopbackHost(rt.rules.listen.host)) {
      this.#adminTls = createServer(options, (req, res) => this.#onAdminTlsRequest(req, res));
      answerClientErrors(this.#adminTls);
      answerTlsOnSamePort(this.#outer, this.#adminTls, this.#minter, rt.rules.timeouts.handshakeMs);
    }
    this.#inner = createServer(options, (req, res) => this.#onInterceptedRequest(req, res));
    this.#cap = new ConnectionCap(this.#outer, connectionLimit(rt.rules), opts.log);
    this.#cap.watch(this.#outer);
    this.#cap.watch(this.#inner);
    applyConnectionRules(this.#outer, this.#inner, rt.rules, this.#cap);
    trackConnections(this.#inner);
    releaseAfterSurges(this.#outer, releaseHeap);
    this.#outer.on("connect", (req: IncomingMessage, socket: Socket, head: Buffer) =>
      this.#onConnect(req, socket, head),
    );
    answerClientErrors(this.#outer);
    answerClientErrors(this.#inner, { connectInside: true });
    this.#inner.on("upgrade", (req: IncomingMessage, socket: Socket, head: Buffer) =>
      this.#onUpgrade(req, socket, head, true),
    );
    this.#outer.on("upgrade", (req: IncomingMessage, socket: Socket, head: Buffer) =>
      this.#onUpgrade(req, socket, head, false),
    );
    this.#outer.on("connection", (socket: Socket) => {
      socket.setNoDelay(true);
      this.#sockets.add(socket);
      socket.once("close", () => this.#sockets.delete(socket));
    });
  }

  static async create(opts: BrokerOptions): Promise<Broker> {
    const ca = loadOrCreateCa(opts.home);
    const rt = await Broker.#buildRuntime(opts, opts.rules);
    const shared = await openSharedState(opts.rules, {
      home: opts.home,
      homeKey: () => homeKey(opts.home),
      resolve: async (ref) => (await rt.resolver.resolve(ref)).secret?.reveal(),
      log: { warn: (m) => opts.log.warn(m), info: (m) => opts.log.info(m) },
    });
    const broker = new Broker(opts, ca, rt, shared);
    try {
      await broker.logins.open();
    } catch (err) {
      if (opts.rules.state === undefined) throw err;
      // A fleet broker starts degraded: the logins arrive when Redis answers.
      opts.log.warn(`OAuth logins not loaded yet: ${(err as Error).message}`);
    }
    return broker;
  }

  static #buildRuntime(opts: BrokerOptions, rules: Rules): Promise<Runtime> {
    const resolver = createSecretResolver(rules, {
      env: opts.env ?? process.env,
      home: opts.home,
      warn: (message) => opts.log.warn(message),
    });
    return Runtime.build(rules, resolver, homeKey(opts.home));
  }

  /** Each audit chain's state, for `status` (none when the audit log is off). */
  auditHealth(): AuditHealth[] {
    return this.#audit?.health() ?? [];
  }

  get runtime(): Runtime {
    return this.#rt;
  }

  get address(): BrokerAddress {
    if (this.#address === undefined) throw new Error("the broker is not listening");
    return this.#address;
  }

  #createAgent(rt: Runtime): Agent {
    return createUpstreamAgent({
      upstreamCa: rt.rules.upstreamCa,
      timeoutMs: rt.rules.timeouts.upstreamMs,
      policy: {
        resolve: (host, port) => rt.rules.resolve.get(`${host}:${port}`),
        allowsPrivate: (host, port) => this.#allowsPrivate(rt, host, port),
      },
    });
  }

  #setUpAuth(rt: Runtime): void {
    rt.logins = this.logins;
    rt.refresher = this.#refresher;
    for (const p of rt.providers.values()) {
      const auth = createUpstreamAuth(p.rule, rt.resolver, () => this.#agent);
      if (auth !== undefined) rt.upstreamAuth.set(p.rule.id, auth);
    }
  }

  /** The refresher of OAuth logins: the broker's agent, the current rules' clients, the audit log. */
  #createRefresher(): Refresher {
    const refresher = new Refresher({
      logins: this.logins,
      rule: (provider) => this.#rt.providers.get(provider)?.rule,
      client: (provider) => this.oauthClient(provider),
      loginClient: (provider, id) => {
        const rule = this.#rt.providers.get(provider)?.rule;
        return rule === undefined || !kindOf(rule).boundLogins ? undefined : this.#mcpClient(rule, id);
      },
      onEvent: (decision, login, detail) => {
        const fingerprint = fingerprintOf(login.accessToken);
        this.#audit?.record({
          decision,
          provider: login.provider,
          credential: login.id,
          fingerprint,
          ...(detail === undefined ? {} : { reason: detail }),
        });
        if (decision === "reauth_required") {
          const hint = `keybroker auth add ${login.provider}${labelFlag(login.id)}`;
          this.metrics.loginNeedsReauth(login.provider);
          this.log.warn(
            { provider: login.provider, credential: login.id },
            `the OAuth login ${login.provider}/${login.id} needs a new login (${detail}): run ${hint}`,
          );
          // Once per login: only the write that marked it reports it, in whichever broker.
          void this.notifier.notify({
            event: "reauth_required",
            provider: login.provider,
            credential: login.id,
            hint,
          });
        }
      },
      onRefresh: (provider, result) => this.metrics.refreshed(provider, result),
      warn: (message) => this.log.warn(message),
    });
    this.logins.listen({
      onHeld: (login, provider, id) =>
        login === undefined ? refresher.unschedule(provider, id) : refresher.schedule(login),
    });
    return refresher;
  }

  readonly #oauthClients = new WeakMap<ProviderRule, OAuthClient>();

  /** The OAuth client of a provider with `oauth:` (one per rule set), on the broker's agent. */
  oauthClient(provider: string): OAuthClient | undefined {
    const rule = this.#rt.providers.get(provider)?.rule;
    // An MCP server's client belongs to each login (its binding): see #mcpClient.
    if (rule === undefined || !kindOf(rule).poolOfLogins || kindOf(rule).boundLogins) return undefined;
    let client = this.#oauthClients.get(rule);
    if (client === undefined) {
      const spec = rule.oauth!;
      const resolver = this.#rt.resolver;
      client = new OAuthClient(
        provider,
        spec,
        () => this.#agent,
        async () =>
          spec.clientSecret === undefined
            ? undefined
            : (await resolver.resolve(spec.clientSecret)).secret?.reveal(),
      );
      this.#oauthClients.set(rule, client);
    }
    return client;
  }

  async loginClient(provider: string, id: string): Promise<OAuthClient | undefined> {
    const rule = this.#rt.providers.get(provider)?.rule;
    return rule !== undefined && kindOf(rule).boundLogins
      ? this.#mcpClient(rule, id)
      : this.oauthClient(provider);
  }

  /** Records one audit line (for the admin API and page). */
  audit(entry: AuditEntry): void {
    this.#audit?.record(entry);
  }

  /** Serves a connection accepted elsewhere: an isolated launch's listener (decision 115). */
  acceptConnection(socket: Socket): void {
    this.#outer.emit("connection", socket);
  }

  /** Reloads the rule file (set by `start`, which knows where it is); see reloadRejected. */
  reloadRules(): Promise<void> {
    return this.#opts.reloadRules?.() ?? Promise.reject(new Error("this broker has no rule file to reload"));
  }

  /**
   * An MCP login's client: its binding, from the shared state (the home, or the fleet's Redis,
   * where a Redis that does not answer fails this refresh as it fails taking the lock), read
   * at refresh time only, off the request path.
   */
  async #mcpClient(rule: ProviderRule, id: string): Promise<OAuthClient | undefined> {
    const store = this.sharedState.mcp;
    const binding = await store.binding(rule.id, id);
    if (binding === undefined) return undefined;
    const spec = rule.oauth!;
    const resolver = this.#rt.resolver;
    const configured = async () =>
      spec.clientSecret === undefined
        ? undefined
        : (await resolver.resolve(spec.clientSecret)).secret?.reveal();
    return mcpClient(rule, binding, () => this.#agent, bindingSecret(binding, store, configured));
  }

  #allowsPrivate(rt: Runtime, host: string, port: number): boolean {
    return allowsPrivate(rt.rules, host, port);
  }

  async listen(): Promise<BrokerAddress> {
    const { host } = this.#rt.rules.listen;
    const port = this.#opts.port ?? this.#rt.rules.listen.port;
    await new Promise<void>((resolve, reject) => {
      this.#outer.once("error", reject);
      this.#outer.listen(port, host, () => {
        this.#outer.off("error", reject);
        resolve();
      });
    });
    const addr = this.#outer.address() as AddressInfo;
    const shown = addr.address.includes(":") ? `[${addr.address}]` : addr.address;
    this.#address = { host: addr.address, port: addr.port, url: `http://${shown}:${addr.port}` };
    if (this.#opts.advertise) this.#advertise();
    return this.#address;
  }

  #advertise(): void {
    writeBrokerRecord(this.home, {
      pid: process.pid,
      url: this.address.url,
      port: this.address.port,
      host: this.address.host,
      version: VERSION,
      ca: this.ca.certPath,
      bundle: this.bundlePath,
      rules: this.#rt.rules.origin,
      startedAt: this.startedAt.toISOString(),
    });
  }

  /** When the last reload was rejected, and why; cleared by a reload that succeeds. */
  get reloadRejected(): { readonly at: Date; readonly message: string } | undefined {
    return this.#reloadRejected;
  }

  /** Notes a rejected reload (the rule file did not load): `status` reports it. */
  rejectReload(message: string): void {
    this.#reloadRejected = { at: new Date(), message };
  }

  /** Swaps in a new rule set. On failure the old rules stay and the error is thrown. */
  async reload(rules: Rules): Promise<void> {
    const rt = await Broker.#buildRuntime(this.#opts, rules);
    const agent = this.#createAgent(rt); // reads upstream_ca: may fail, before anything changes
    this.#reloadRejected = undefined;
    if (JSON.stringify(rules.state) !== JSON.stringify(this.#rt.rules.state))
      this.log.warn("state: a change of the shared state takes effect when the broker restarts");
    const old = this.#agent;
    this.#rt = rt;
    this.#agent = agent;
    this.#setUpAuth(rt);
    this.notifier.setCommand(rt.rules.notify);
    applyConnectionRules(this.#outer, this.#inner, rt.rules, this.#cap);
    this.#audit?.record({ decision: "reload", reason: rt.rules.origin });
    if (this.#address !== undefined && this.#opts.advertise) this.#advertise();
    old.close().catch(() => {});
  }

  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.#outer.close(() => resolve()));
    this.#inner.close();
    this.#adminTls?.close();
    this.#adminPage.close();
    this.#outer.closeAllConnections();
    for (const socket of this.#sockets) socket.destroy();
    await closed;
    await this.#agent.destroy().catch(() => {});
    this.approvals.close();
    this.launches.close();
    this.logins.close();
    this.#refresher.close();
    this.pools.flush();
    await this.sharedState.close();
    await this.#audit?.close();
    if (this.#opts.advertise && this.#address !== undefined)
      removeBrokerRecord(this.home, this.#address.port);
  }

  /** A refusal as it is; anything else is a bug: logged with its stack, 500 to the client. */
  #asBrokerError(err: unknown): BrokerError {
    if (err instanceof BrokerError) return err;
    this.log.error({ err }, "internal error while handling a request");
    return internalError();
  }

  #authenticate(header: string | undefined): ClientState {
    const { user, password } = proxyCredentials(header);
    const rt = this.#rt;
    const launch = this.launches.authenticate(rt, user, password);
    if (launch !== undefined && launch !== null) return launch;
    const client = launch === null ? undefined : rt.authenticate(user, password);
    if (client !== undefined) return client;
    const name = user === undefined || user === "" ? "default" : user.slice(0, 64);
    const known = [...rt.clients.keys()].join(", ");
    let message: string;
    let reason: string;
    if (user === undefined || user === "") {
      reason = "no proxy credentials";
      message = "this broker needs a client name and token";
    } else if (rt.clients.has(name)) {
      reason = password === undefined ? "no token" : "wrong token";
      message = `client "${name}" did not authenticate`;
    } else {
      reason = "no such client";
      // Off loopback, a caller that has not authenticated learns no client names.
      const listed = isLoopbackHost(rt.rules.listen.host) ? ` (known: ${known})` : "";
      message = `no such client "${name}"${listed}`;
    }
    // Never the token: only the name it claimed and why it failed.
    this.log.warn({ client: name, reason, known }, `proxy authentication failed (407): ${reason}`);
    throw new BrokerError("client_unauthorized", message, {
      hint: "use the proxy URL that `keybroker env --client <name>` prints",
    });
  }

  #onConnect(req: IncomingMessage, socket: Socket, head: Buffer): void {
    socket.on("error", () => socket.destroy());
    let target: { host: string; port: number } | undefined;
    try {
      target = parseHostHeader(req.url ?? "", 443);
      if (target === undefined || !/:\d+$/.test(req.url ?? "")) {
        throw new BrokerError(
          "bad_request",
          `CONNECT needs a host:port target with a port from 1 to 65535, got "${(req.url ?? "").slice(0, 200)}"`,
        );
      }
      const client = this.#authenticate(req.headers["proxy-authorization"]);
      const rt = this.#rt;
      const provider = rt.providerForHost(target.host, target.port);
      if (provider !== undefined || rt.rules.intercept === "all") {
        intercept(
          socket,
          head,
          { ...target, client: client.rule.name, launch: client.launch?.id },
          this.#minter,
          this.#inner,
          rt.rules.timeouts.handshakeMs,
        );
        return;
      }
      const where = `${target.host}:${target.port}`;
      // Audited once the outcome is known: a tunnel that never opened is not "tunnelled". A
      // refused private address is a block; an unreachable target passed through and failed.
      const audit = (outcome?: BrokerError, refused = false) => {
        this.metrics.tunnel(client.rule.name, refused ? "blocked" : "passthrough", outcome?.status ?? 200);
        this.#audit?.record({
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
      const allowed = mapped !== undefined || this.#allowsPrivate(rt, target.host, target.port);
      const onTunnelError = (e: Error) => {
        this.log.debug(
          { target: where, err: (e as NodeJS.ErrnoException).code },
          "tunnel target unreachable",
        );
        refuse(new BrokerError("upstream_unreachable", `could not reach ${where}`));
      };
      const onTunnelled = () => {
        audit();
        // The client's first byte through the tunnel is its request (limits.connections).
        if (head.length > 0) this.#cap.settled(socket);
        else socket.once("data", () => this.#cap.settled(socket));
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
      writeRawError(socket, this.#asBrokerError(err));
    }
  }

  /** Where an intercepted request goes: the host and port its CONNECT named. */
  #interceptedTarget(req: IncomingMessage): Target {
    const info = connectInfo(req.socket);
    const client =
      info === undefined
        ? undefined
        : info.launch === undefined
          ? this.#rt.clients.get(info.client)
          : this.launches.state(this.#rt, info.launch);
    if (info === undefined || client === undefined) {
      throw new BrokerError("client_unauthorized", "the client of this connection is no longer configured");
    }
    assertHostHeader(req);
    const sni = (req.socket as { servername?: string | false }).servername;
    return {
      mode: "intercept",
      client,
      host: info.host,
      port: info.port,
      scheme: "https",
      path: interceptedPath(req.url ?? "/", info.host, info.port),
      sni: sni || undefined,
    };
  }

  /** Where a request to the listener itself goes: a reverse mount, or a plain-HTTP proxy target. */
  #outerTarget(req: IncomingMessage): Target {
    assertHostHeader(req);
    const url = req.url ?? "/";
    if (url.startsWith("/")) {
      const mounted = this.#rt.providerForMount(url.split("?")[0]!);
      if (mounted === undefined) {
        throw new BrokerError("bad_request", `no provider is mounted at ${url.split("?")[0]}`, {
          hint: "reverse mode paths look like /p/<provider>/<path>; see keybroker env",
        });
      }
      const client = this.#authenticate(req.headers["proxy-authorization"]);
      const upstream = new URL(mounted.provider.rule.upstream!);
      const after = url.slice(mounted.provider.rule.mount!.length);
      const rest = after.startsWith("/") ? after : "/" + after;
      // Only an MCP server on loopback may be plain http (rules/schema.ts).
      const http = upstream.protocol === "http:";
      return {
        mode: "reverse",
        client,
        host: normalizeHost(upstream.hostname),
        port: Number(upstream.port) || (http ? 80 : 443),
        scheme: http ? "http" : "https",
        path: upstream.pathname.replace(/\/$/, "") + rest,
        sni: undefined,
        provider: mounted.provider,
        reverseRest: rest,
      };
    }
    let target: URL;
    try {
      target = new URL(url);
    } catch {
      throw new BrokerError("bad_request", `not a valid request target: ${url.slice(0, 200)}`);
    }
    if (target.protocol !== "http:") {
      throw new BrokerError("bad_request", `${target.protocol} URLs must be sent through CONNECT`, {
        hint: "configure the proxy as HTTPS_PROXY so the client tunnels HTTPS",
      });
    }
    let host: string;
    try {
      host = normalizeHost(target.hostname);
    } catch {
      throw new BrokerError("bad_request", `not a valid request target: ${url.slice(0, 200)}`);
    }
    return {
      mode: "plain",
      client: this.#authenticate(req.headers["proxy-authorization"]),
      host,
      port: Number(target.port) || 80,
      scheme: "http",
      path: target.pathname + target.search,
      sni: undefined,
    };
  }

  #onInterceptedRequest(req: IncomingMessage, res: ServerResponse): void {
    try {
      void this.#handle(req, res, this.#interceptedTarget(req));
    } catch (err) {
      sendError(res, this.#asBrokerError(err));
    }
  }

  /**
   * The listener's own endpoints (reverse mounts, admin, health) answer local programs only:
   * a web page could otherwise make the user's browser spend their keys (a cross-site request,
   * or DNS rebinding onto 127.0.0.1). Browsers name themselves in Origin / Sec-Fetch-Site and
   * a rebound name in Host; agents and SDKs send neither.
   */
  #assertLocalCaller(req: IncomingMessage): void {
    const host = parseHostHeader(req.headers.host ?? "", 80);
    const listen = this.#rt.rules.listen.host;
    const local = (h: string) => isLoopbackHost(h) || h === listen;
    if (host === undefined || !local(host.host)) {
      throw new BrokerError("bad_request", `requests for "${req.headers.host ?? ""}" are not served here`, {
        hint: "address keybroker as 127.0.0.1 or localhost",
      });
    }
    const site = req.headers["sec-fetch-site"];
    const origin = req.headers.origin;
    let originHost: string | undefined;
    try {
      originHost =
        origin === undefined || origin === "null" ? undefined : normalizeHost(new URL(origin).hostname);
    } catch {
      originHost = "invalid";
    }
    if (
      site === "cross-site" ||
      site === "same-site" ||
      origin === "null" ||
      (originHost !== undefined && !local(originHost))
    ) {
      throw new BrokerError("bad_request", "requests from web pages are refused", {
        hint: "keybroker serves local programs; a browser page may not use it",
      });
    }
  }

  #onOuterRequest(req: IncomingMessage, res: ServerResponse): void {
    const url = req.url ?? "/";
    try {
      // The admin page checks its callers itself: sessions, CSRF tokens, the Host it is named by.
      if (isAdminPagePath(url)) {
        void this.#adminPage.handle(req, res);
        return;
      }
      if (isMetricsRequest(url)) {
        void this.#metricsEndpoint.handle(req, res, () => this.#assertLocalCaller(req));
        return;
      }
      // The root leads to the admin page, by whatever address a person opened (SPEC §16: never
      // an error where a form belongs); the page then checks its callers itself.
      if (url === "/" && (req.method === "GET" || req.method === "HEAD") && !this.#rt.providerForMount("/")) {
        res.writeHead(303, { location: "/admin/" });
        res.end();
        return;
      }
      if (url.startsWith("/")) this.#assertLocalCaller(req);
      if (url.startsWith(ADMIN_PREFIX)) {
        void handleAdmin(this, this.#adminToken, req, res, this.#adminPage);
        return;
      }
      if (url === HEALTH_PATH) {
        const body = JSON.stringify({ ok: true, version: VERSION, pid: process.pid });
        res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
        res.end(body);
        return;
      }
      void this.#handle(req, res, this.#outerTarget(req));
    } catch (err) {
      sendError(res, this.#asBrokerError(err));
    }
  }

  /** A request that came over TLS straight to the listener: only the admin page is served there. */
  #onAdminTlsRequest(req: IncomingMessage, res: ServerResponse): void {
    const url = req.url ?? "/";
    if (isAdminPagePath(url)) {
      void this.#adminPage.handle(req, res);
      return;
    }
    if (url === "/") {
      res.writeHead(303, { location: "/admin/" });
      res.end();
      return;
    }
    sendError(
      res,
      new BrokerError("bad_request", "over TLS this port serves only the admin page at /admin/", {
        hint: "use it as a proxy over plain HTTP (HTTPS_PROXY=http://...)",
      }),
    );
  }

  #onUpgrade(req: IncomingMessage, socket: Socket, head: Buffer, intercepted: boolean): void {
    socket.on("error", () => socket.destroy());
    // A response bound to the raw socket, so refusals go out as ordinary error responses.
    const res = new ServerResponse(req);
    res.assignSocket(socket);
    res.shouldKeepAlive = false;
    // A refusal says `Connection: close`; no server hook closes a response made by hand.
    res.once("finish", () => socket.end());
    try {
      if (!intercepted && (req.url ?? "/").startsWith("/")) this.#assertLocalCaller(req);
      const target = intercepted ? this.#interceptedTarget(req) : this.#outerTarget(req);
      void this.#handle(req, res, target, { socket, head });
    } catch (err) {
      sendError(res, this.#asBrokerError(err));
    }
  }

  #newExchange(req: IncomingMessage, res: ServerResponse, t: Target): Exchange {
    const headers = forwardableRequestHeaders(req.rawHeaders, req.headers.connection);
    if (t.mode === "reverse") {
      // The loopback Host means nothing upstream.
      setHeader(headers, "host", t.port === 443 ? t.host : `${t.host}:${t.port}`);
    }
    return {
      req,
      res,
      mode: t.mode,
      rt: this.#rt,
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
      pools: this.pools,
      injection: undefined,
      body: undefined,
      reverseRest: t.reverseRest,
      tried: new Set(),
      upstreamMs: 0,
      heldMs: 0,
    };
  }

  async #handle(
    req: IncomingMessage,
    res: ServerResponse,
    t: Target,
    upgrade?: { socket: Socket; head: Buffer },
  ): Promise<void> {
    const x = this.#newExchange(req, res, t);
    const onEvent = (e: PoolEvent) => this.#onPoolEvent(x, e);
    try {
      try {
        await runStages(this.#stages, x);
      } catch (err) {
        if (!(err instanceof BrokerError) || !(await fallBackBeforeSending(x, err, this.log, onEvent)))
          throw err;
      }
      if (upgrade !== undefined) {
        const answer = await forwardUpgrade(this.#agent, x, upgrade.socket, upgrade.head);
        const status = answer === 101 ? 101 : answer.status;
        this.#record(x, x.secret === undefined ? "passthrough" : "injected", status);
        // A refused upgrade marks the credential as a refused request would.
        if (answer !== 101 && x.injection !== undefined && mayMark(status))
          bookkeep(x, answer, this.log, onEvent);
      } else {
        const result = await forwardWithPool(x, this.#agent, this.log, onEvent);
        // A body refused after the upstream had begun to answer: the exchange was cut off.
        const refused = x.refusedBody;
        if (refused !== undefined) this.#logRefusal(x, refused);
        this.#record(
          x,
          refused !== undefined ? "blocked" : x.secret === undefined ? "passthrough" : "injected",
          result.status,
          refused?.code,
          result,
        );
      }
    } catch (err) {
      // The client hung up on a held request: its withdrawal is audited, nobody is left to answer.
      if (err instanceof Withdrawn) return;
      if (err instanceof BrokerError) {
        this.#logRefusal(x, err);
        this.#record(x, "blocked", err.status, err.code);
        sendError(res, err);
      } else {
        this.log.error({ err }, "internal error while handling a request");
        sendError(res, internalError());
      }
      req.resume();
    }
  }

  /** Called by the admin API after `auth reset`. */
  onReset(provider: string, cleared: readonly string[]): void {
    this.log.info({ provider, cleared }, "pool marks reset");
    this.#audit?.record({
      decision: "reset",
      provider,
      reason: cleared.length ? `cleared ${cleared.join(", ")}` : "nothing to clear",
    });
  }

  /** One audit line for a request: who, which credential (id and fingerprint only), what came of it. */
  #record(x: Exchange, decision: AuditDecision, status: number, code?: string, result?: ForwardResult): void {
    this.metrics.request(x, decision, status, code, result);
    if (this.#accessLogEnv || x.rt.rules.accessLog) logAccess(this.log, x, decision, status, code, result);
    this.usage.count(
      x.client.rule.name,
      x.provider?.rule.id,
      status,
      decision === "blocked",
      (result?.bytesIn ?? 0) + (result?.bytesOut ?? 0),
    );
    if (this.#audit === undefined) return;
    const query = x.provider?.rule.inject.query;
    // Built in one literal (absent fields stay undefined and are left out of the line): one
    // object per request, where spreads made one more for each optional group.
    this.#audit.record({
      decision,
      client: x.client.rule.name,
      launch: x.client.launch?.id,
      provider: x.provider?.rule.id,
      credential: x.secret?.id,
      fingerprint: x.secret?.fingerprint,
      method: x.req.method ?? "GET",
      host: x.port === (x.scheme === "https" ? 443 : 80) ? x.host : `${x.host}:${x.port}`,
      path: x.path,
      status,
      code: code || undefined,
      bytesIn: result?.bytesIn,
      bytesOut: result?.bytesOut,
      durationMs: Math.round((performance.now() - x.startedAt) * 10) / 10,
      stripParams: query ? [query] : undefined,
    });
  }

  /** `keybroker approve <id>`, with --home when this broker's home is not the default one. */
  approveCommand(id: string, verb: "approve" | "deny" = "approve"): string {
    const home = this.home === homePath(undefined, {}) ? "" : ` --home ${shellQuote(this.home)}`;
    return `keybroker ${verb} ${id}${home}`;
  }

  /** Each step of an approval: a log line (the held one says how to answer) and an audit line. */
  #onApprovalEvent(e: ApprovalEvent): void {
    const r = e.request;
    const id = r.id ?? "";
    const what = `${r.method} ${r.host}${r.path} (${r.provider}, client ${r.client})`;
    const until = e.until === undefined ? "" : ` until ${new Date(e.until).toISOString()}`;
    let reason: string;
    switch (e.decision) {
      case "held":
        reason = `approval ${id}: waiting up to ${Math.round((e.timeoutMs ?? 0) / 1000)} s`;
        this.log.warn(
          {
            approval: id,
            client: r.client,
            provider: r.provider,
            method: r.method,
            host: r.host,
            path: r.path,
          },
          `held ${what} for approval ${id}: to let it through run  ${this.approveCommand(id)}  (or ${this.approveCommand(id, "deny")}); it is refused in ${Math.round((e.timeoutMs ?? 0) / 1000)} s`,
        );
        // Names and ids only (never the body preview or a header): the event may go to a chat.
        void this.notifier.notify({
          event: "approval_pending",
          id,
          client: r.client,
          provider: r.provider,
          method: r.method,
          host: r.host,
          path: r.path,
          expires_in: Math.round((e.timeoutMs ?? 0) / 1000),
          approve: this.approveCommand(id),
        });
        break;
      case "approved":
        reason =
          r.id === undefined
            ? `covered by ${e.by}${until}`
            : `approval ${id} approved by ${e.by}${e.until === undefined ? "" : ` for the same client, provider and rule${until}`}`;
        break;
      case "denied":
        reason = `approval ${id} denied by ${e.by}`;
        break;
      case "approval_timeout":
        reason = `approval ${id}: nobody answered in time`;
        break;
      case "withdrawn":
        reason = `approval ${id} withdrawn: the client hung up`;
        break;
    }
    if (e.decision === "held") this.metrics.approvalHeld();
    else if (r.id !== undefined) this.metrics.approvalAnswered(e.decision);
    if (e.decision !== "held")
      this.log.info({ approval: id || undefined, provider: r.provider }, `${what}: ${reason}`);
    this.#audit?.record({
      decision: e.decision,
      client: r.client,
      provider: r.provider,
      method: r.method,
      host: r.host,
      path: r.path,
      reason,
    });
  }

  #onPoolEvent(x: Exchange, e: PoolEvent): void {
    this.metrics.poolEvent(e.decision, e.provider, e.credential, x.provider?.rule.id);
    this.#audit?.record({
      decision: e.decision === "fallback" ? "retried" : e.decision,
      client: x.client.rule.name,
      launch: x.client.launch?.id,
      provider: e.provider,
      credential: e.credential,
      method: x.req.method ?? "GET",
      host: x.host,
      reason: e.detail,
    });
    if (e.decision !== "marked")
      this.log.info({ provider: e.provider, credential: e.credential }, `${e.decision}: ${e.detail}`);
  }

  #logRefusal(x: Exchange, err: BrokerError): void {
    const fields = {
      code: err.code,
      client: x.client.rule.name,
      provider: err.provider,
      host: x.host,
      method: x.req.method,
    };
    if (err.code === "placeholder_host_mismatch")
      this.log.warn(fields, `possible exfiltration blocked: ${err.message}`);
    else if (err.status >= 500) this.log.warn(fields, err.message);
    else this.log.info(fields, err.message);
  }
}

/** A path as one shell word. */
function shellQuote(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", "'\\''")}'`;
}
