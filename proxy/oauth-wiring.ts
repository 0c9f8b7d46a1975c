// The broker's OAuth wiring (docs/spec.md §8, §15): each provider's OAuth client on the broker's agent,
// an MCP login's client from its binding, and the refresher of every login, which audits,
// counts and notifies what it does. The `Broker` holds one and asks it; nothing here runs per
// proxied request.
import type { Agent } from "undici";
import type { AuditEntry } from "../audit/audit-log.js";
import { authAddCommand } from "../core/hints.js";
import type { Logger } from "../core/log.js";
import type { Notifier } from "../core/notify.js";
import type { BrokerMetrics } from "../metrics/broker-metrics.js";
import { isOAuthRule, kindOf } from "../rules/kinds/index.js";
import type { ProviderRule } from "../rules/types.js";
import type { OAuthLogins } from "../secrets/oauth/logins.js";
import { bindingSecret, mcpClient } from "../secrets/oauth/mcp-login.js";
import { OAuthClient } from "../secrets/oauth/oauth-client.js";
import { Refresher } from "../secrets/oauth/refresher.js";
import { fingerprintOf } from "../secrets/secret.js";
import type { McpStore } from "../state/mcp/store.js";
import type { Runtime } from "./runtime.js";

export interface OAuthWiringParts {
  /** The current runtime (it changes on reload). */
  readonly runtime: () => Runtime;
  /** The broker's upstream agent (it changes on reload). */
  readonly agent: () => Agent;
  readonly logins: OAuthLogins;
  /** MCP bindings and registrations: the home's, or the fleet's. */
  readonly mcp: McpStore;
  readonly log: Logger;
  readonly metrics: BrokerMetrics;
  readonly notifier: Notifier;
  readonly audit: (entry: AuditEntry) => void;
}

export class OAuthWiring {
  readonly #p: OAuthWiringParts;
  readonly #clients = new WeakMap<ProviderRule, OAuthClient>();
  /** Refreshes every login before it expires, under the store's lock (docs/spec.md §8). */
  readonly refresher: Refresher;

  constructor(p: OAuthWiringParts) {
    this.#p = p;
    this.refresher = this.#createRefresher();
  }

  /** The OAuth client of a provider with `oauth:` (one per rule set), on the broker's agent. */
  oauthClient(provider: string): OAuthClient | undefined {
    const rule = this.#p.runtime().providers.get(provider)?.rule;
    // An MCP server's client belongs to each login (its binding): see #mcpClient.
    if (rule === undefined || !isOAuthRule(rule) || kindOf(rule).boundLogins) return undefined;
    let client = this.#clients.get(rule);
    if (client === undefined) {
      const spec = rule.oauth;
      const resolver = this.#p.runtime().resolver;
      client = new OAuthClient(provider, spec, this.#p.agent, async () =>
        spec.clientSecret === undefined
          ? undefined
          : (await resolver.resolve(spec.clientSecret)).secret?.reveal(),
      );
      this.#clients.set(rule, client);
    }
    return client;
  }

  /** The client a login refreshes with: its binding's for an MCP login, else the provider's. */
  async loginClient(provider: string, id: string): Promise<OAuthClient | undefined> {
    const rule = this.#p.runtime().providers.get(provider)?.rule;
    return rule !== undefined && kindOf(rule).boundLogins
      ? this.#mcpClient(rule, id)
      : this.oauthClient(provider);
  }

  close(): void {
    this.refresher.close();
  }

  /**
   * An MCP login's client: its binding, from the shared state (the home, or the fleet's Redis,
   * where a Redis that does not answer fails this refresh as it fails taking the lock), read
   * at refresh time only, off the request path.
   */
  async #mcpClient(rule: ProviderRule, id: string): Promise<OAuthClient | undefined> {
    if (rule.kind !== "mcp") return undefined;
    const store = this.#p.mcp;
    const binding = await store.binding(rule.id, id);
    if (binding === undefined) return undefined;
    const spec = rule.oauth;
    const resolver = this.#p.runtime().resolver;
    const configured = async () =>
      spec.clientSecret === undefined
        ? undefined
        : (await resolver.resolve(spec.clientSecret)).secret?.reveal();
    return mcpClient(rule, binding, this.#p.agent, bindingSecret(binding, store, configured));
  }

  /** The refresher of OAuth logins: the broker's agent, the current rules' clients, the audit log. */
  #createRefresher(): Refresher {
    const p = this.#p;
    const refresher = new Refresher({
      logins: p.logins,
      rule: (provider) => p.runtime().providers.get(provider)?.rule,
      client: (provider) => this.oauthClient(provider),
      loginClient: (provider, id) => {
        const rule = p.runtime().providers.get(provider)?.rule;
        return rule === undefined || !kindOf(rule).boundLogins ? undefined : this.#mcpClient(rule, id);
      },
      onEvent: (decision, login, detail) => {
        const fingerprint = fingerprintOf(login.accessToken);
        p.audit({
          decision,
          provider: login.provider,
          credential: login.id,
          fingerprint,
          ...(detail === undefined ? {} : { reason: detail }),
        });
        if (decision === "reauth_required") {
          const hint = authAddCommand(login.provider, login.id);
          p.metrics.loginNeedsReauth(login.provider);
          p.log.warn(
            { provider: login.provider, credential: login.id },
            `the OAuth login ${login.provider}/${login.id} needs a new login (${detail}): run ${hint}`,
          );
          // Once per login: only the write that marked it reports it, in whichever broker.
          void p.notifier.notify({
            event: "reauth_required",
            provider: login.provider,
            credential: login.id,
            hint,
          });
        }
      },
      onRefresh: (provider, result) => p.metrics.refreshed(provider, result),
      warn: (message) => p.log.warn(message),
    });
    p.logins.listen({
      onHeld: (login, provider, id) =>
        login === undefined ? refresher.unschedule(provider, id) : refresher.schedule(login),
    });
    return refresher;
  }
}
