// The broker: wiring and lifecycle. It builds the runtime (rules, secrets, clients), the
// upstream agent, the OAuth logins (their clients and refresher: proxy/oauth-wiring.ts),
// approvals, the audit trail and metrics, then hands requests from the listener
// (proxy/listener/) to the pipeline (proxy/pipeline.ts); create, listen, reload and close are
// its own.

import type { IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import type { Agent } from "undici";
import { handleAdmin, loadOrCreateAdminToken } from "../admin/api.js";
import { callerOf } from "../admin/callers.js";
import type { AdminHost } from "../admin/host.js";
import { auditLaunchEnded } from "../admin/launches-api.js";
import { AdminPage } from "../admin/page.js";
import { Sessions } from "../admin/sessions.js";
import { providerStatuses } from "../admin/status.js";
import { Usage } from "../admin/usage.js";
import type { AuditEntry, AuditHealth } from "../audit/audit-log.js";
import { AuditTrail } from "../audit/audit-trail.js";
import { writeTrustBundle } from "../certs/bundle.js";
import { type CertificateAuthority, loadOrCreateCa } from "../certs/ca.js";
import { LeafMinter } from "../certs/leaf.js";
import { removeBrokerRecord, writeBrokerRecord } from "../core/broker-records.js";
import { homeKey } from "../core/home.js";
import type { Logger } from "../core/log.js";
import { Notifier } from "../core/notify.js";
import { knownSecrets } from "../core/scrub.js";
import { VERSION } from "../core/version.js";
import { BrokerMetrics } from "../metrics/broker-metrics.js";
import { MetricsEndpoint } from "../metrics/endpoint.js";
import type { Rules } from "../rules/types.js";
import { OAuthLogins } from "../secrets/oauth/logins.js";
import type { OAuthClient } from "../secrets/oauth/oauth-client.js";
import { PoolState } from "../secrets/pool.js";
import { createSecretResolver } from "../secrets/sources.js";
import { openSharedState, type SharedState } from "../state/shared-state.js";
import { accessLogFromEnv } from "./access-log.js";
import { onApprovalEvent } from "./approval-events.js";
import { Approvals } from "./approvals.js";
import type { ExchangeResponse } from "./exchange.js";
import { Launches } from "./launches.js";
import { h2Exchange } from "./listener/h2-exchange.js";
import { http1Exchange } from "./listener/http1-exchange.js";
import { HEALTH_PATH, Listener } from "./listener/listener.js";
import type { Target } from "./listener/request-target.js";
import { allowsPrivate } from "./oauth-agent.js";
import { OAuthWiring } from "./oauth-wiring.js";
import { Pipeline } from "./pipeline.js";
import { Runtime } from "./runtime.js";
import { Recorder } from "./stages/record.js";
import { createUpstreamAuth } from "./upstream-auth.js";
import { alpnOffer, UpstreamRouter } from "./upstream-router.js";
import type { Upgrade } from "./websocket.js";

export { HEALTH_PATH, VERSION };
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

export interface BrokerAddress {
  readonly host: string;
  readonly port: number;
  readonly url: string;
}

export class Broker implements AdminHost {
  readonly home: string;
  readonly ca: CertificateAuthority;
  readonly bundlePath: string;
  readonly log: Logger;
  #rt: Runtime;
  #agent: Agent;
  /** The agent's router: HTTP/2 to origins that speak it (upstream-router.ts). */
  #upstream: UpstreamRouter;
  readonly #minter: LeafMinter;
  /** The port, its connections and routes (proxy/listener/). */
  readonly #listener: Listener;
  /** Every step a request takes (proxy/pipeline.ts). */
  readonly #pipeline: Pipeline;
  readonly #opts: BrokerOptions;
  readonly #adminToken: string;
  readonly #adminPage: AdminPage;
  /** Requests per client and provider over the last 24 h, for the admin page. */
  readonly usage = new Usage();
  /** `run --isolate` launches, each with its own client identity (decision 114). */
  readonly launches = new Launches();
  /** What /metrics reports (docs/spec.md §18), counted as things happen. */
  readonly metrics = new BrokerMetrics();
  readonly #metricsEndpoint: MetricsEndpoint;
  readonly pools: PoolState;
  readonly #audit: AuditTrail | undefined;
  /** Requests held by `approve` rules until a person answers them (docs/spec.md §16). */
  readonly approvals: Approvals;
  /** OAuth logins from the token store, followed as they change (docs/spec.md §8). */
  readonly logins: OAuthLogins;
  /** OAuth clients and the refresher of logins (proxy/oauth-wiring.ts). */
  readonly #oauth: OAuthWiring;
  /** `notify: "cmd:…"`: told of events that need a person (docs/spec.md §16). */
  readonly notifier: Notifier;
  /** Where marks and logins are shared: the home, or a fleet's Redis (docs/spec.md §17). */
  readonly sharedState: SharedState;
  #address: BrokerAddress | undefined;
  #reloadRejected: { at: Date; message: string } | undefined;
  readonly startedAt = new Date();

  private constructor(opts: BrokerOptions, ca: CertificateAuthority, rt: Runtime, shared: SharedState) {
    this.#opts = opts;
    this.home = opts.home;
    this.log = opts.log;
    this.ca = ca;
    this.bundlePath = writeTrustBundle(ca, opts.home);
    this.#minter = new LeafMinter(ca);
    this.#rt = rt;
    this.#upstream = this.#createUpstream(rt);
    this.#agent = this.#upstream.agent;
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
    this.#oauth = new OAuthWiring({
      runtime: () => this.#rt,
      agent: () => this.#agent,
      logins: this.logins,
      mcp: shared.mcp,
      log: opts.log,
      metrics: this.metrics,
      notifier: this.notifier,
      audit: (entry) => this.#audit?.record(entry),
    });
    this.#setUpAuth(rt);
    this.approvals = new Approvals({
      onEvent: (e) =>
        onApprovalEvent(
          {
            home: this.home,
            log: opts.log,
            notifier: this.notifier,
            metrics: this.metrics,
            audit: (a) => this.audit(a),
          },
          e,
        ),
      store: shared.approvals,
    });
    this.pools = new PoolState(opts.home, (message) => opts.log.warn(message));
    shared.attachPools(this.pools);
    shared.attachLogins(() => this.logins.all());
    const { audit } = rt.rules;
    this.#audit = audit.enabled
      ? new AuditTrail(opts.home, {
          maxBytes: audit.maxBytes,
          keep: audit.keep,
          scrubber: knownSecrets,
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
    this.#adminPage = new AdminPage(this, this.#adminToken, this.usage, new Sessions(shared.sessions));
    this.metrics.launches = () => this.launches.list();
    this.launches.onGone = (launch) => auditLaunchEnded(this, launch, "its run is gone");
    this.#pipeline = new Pipeline({
      log: opts.log,
      auditWritable: () => this.#audit?.writable ?? true,
      approvals: this.approvals,
      agent: () => this.#agent,
      upstream: () => this.#upstream,
      recorder: new Recorder({
        log: opts.log,
        metrics: this.metrics,
        usage: this.usage,
        audit: this.#audit,
        accessLogEnv: accessLogFromEnv(opts.env ?? process.env),
      }),
    });
    this.#listener = new Listener({
      rules: rt.rules,
      runtime: () => this.#rt,
      launches: this.launches,
      log: opts.log,
      minter: this.#minter,
      caFingerprint: ca.fingerprint256,
      metrics: this.metrics,
      audit: (entry) => this.audit(entry),
      adminPage: this.#adminPage,
      metricsEndpoint: this.#metricsEndpoint,
      admin: (req, res) => void handleAdmin(this, this.#adminToken, req, res, this.#adminPage),
      handle: (req, res, t, upgrade) => this.#handle(req, res, t, upgrade),
      handleStream: (stream, headers, raw, t) =>
        this.#pipeline.run(h2Exchange(stream, headers, raw, t, this.#rt, this.pools)),
      alpn: (info) => alpnOffer(this.#upstream, info.host, info.port),
    });
  }

  /** One request bound upstream, from the listener: through the pipeline. */
  #handle(req: IncomingMessage, res: ExchangeResponse, t: Target, upgrade?: Upgrade): Promise<void> {
    return this.#pipeline.run(http1Exchange(req, res, t, this.#rt, this.pools), upgrade);
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

  #createUpstream(rt: Runtime): UpstreamRouter {
    return new UpstreamRouter({
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
    rt.refresher = this.#oauth.refresher;
    for (const p of rt.providers.values()) {
      const auth = createUpstreamAuth(p.rule, rt.resolver, () => this.#agent);
      if (auth !== undefined) rt.upstreamAuth.set(p.rule.id, auth);
    }
  }

  /** The OAuth client of a provider with `oauth:` (one per rule set), on the broker's agent. */
  oauthClient(provider: string): OAuthClient | undefined {
    return this.#oauth.oauthClient(provider);
  }

  loginClient(provider: string, id: string): Promise<OAuthClient | undefined> {
    return this.#oauth.loginClient(provider, id);
  }

  /** Records one audit line (for the admin API and page). */
  audit(entry: AuditEntry): void {
    this.#audit?.record(entry);
  }

  /** Serves a connection accepted elsewhere: an isolated launch's listener (decision 115). */
  acceptConnection(socket: Socket): void {
    this.#listener.acceptConnection(socket);
  }

  /** Reloads the rule file (set by `start`, which knows where it is); see reloadRejected. */
  reloadRules(): Promise<void> {
    return this.#opts.reloadRules?.() ?? Promise.reject(new Error("this broker has no rule file to reload"));
  }

  #allowsPrivate(rt: Runtime, host: string, port: number): boolean {
    return allowsPrivate(rt.rules, host, port);
  }

  async listen(): Promise<BrokerAddress> {
    const { host } = this.#rt.rules.listen;
    const port = this.#opts.port ?? this.#rt.rules.listen.port;
    const addr = await this.#listener.listen(port, host);
    const shown = addr.address.includes(":") ? `[${addr.address}]` : addr.address;
    this.#address = { host: addr.address, port: addr.port, url: `http://${shown}:${addr.port}` };
    // A launch's own listener, made inside its network namespace, serves as this one (decision 139).
    this.launches.serving = { port: addr.port, accept: (socket) => this.#listener.acceptConnection(socket) };
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
    const upstream = this.#createUpstream(rt); // reads upstream_ca: may fail, before anything changes
    this.#reloadRejected = undefined;
    if (JSON.stringify(rules.state) !== JSON.stringify(this.#rt.rules.state))
      this.log.warn("state: a change of the shared state takes effect when the broker restarts");
    const old = this.#upstream;
    this.#rt = rt;
    this.#upstream = upstream;
    this.#agent = upstream.agent;
    this.#setUpAuth(rt);
    this.notifier.setCommand(rt.rules.notify);
    this.#listener.applyRules(rt.rules);
    this.#audit?.record({ decision: "reload", reason: rt.rules.origin });
    if (this.#address !== undefined && this.#opts.advertise) this.#advertise();
    old.close().catch(() => {});
  }

  async close(): Promise<void> {
    const closed = this.#listener.close();
    this.#adminPage.close();
    await closed;
    await this.#upstream.destroy().catch(() => {});
    this.approvals.close();
    this.launches.close();
    this.logins.close();
    this.#oauth.close();
    this.pools.flush();
    await this.sharedState.close();
    await this.#audit?.close();
    if (this.#opts.advertise && this.#address !== undefined)
      removeBrokerRecord(this.home, this.#address.port);
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
}
