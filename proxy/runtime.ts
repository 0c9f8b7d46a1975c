// The broker's working view of one rule set: providers by host, placeholders, clients, and
// which providers are active. Built once per load or reload; the request path only reads it.
import type { IncomingHttpHeaders } from "node:http";
import { sameToken } from "../core/same-token.js";
import { hostMatches, hostPatternKey } from "../rules/host-pattern.js";
import { isOAuthRule, kindOf } from "../rules/kinds/index.js";
import type { ClientRule, HostPattern, ProviderRule, Rules } from "../rules/types.js";
import type { OAuthLogins } from "../secrets/oauth/logins.js";
import { Phantoms } from "../secrets/oauth/phantoms.js";
import type { Refresher } from "../secrets/oauth/refresher.js";
import { PlaceholderIndex } from "../secrets/placeholders.js";
import type { Resolution, SecretResolver } from "../secrets/resolver.js";
import type { Secret } from "../secrets/secret.js";
import type { HeaderList } from "./headers.js";
import type { LaunchInfo } from "./launches.js";
import { ScrubPatterns } from "./scrub-stream.js";

/** What a service-account signer reads and sets on a request; an Exchange is one. */
export interface AuthTarget {
  readonly method: string;
  readonly req: { readonly headers: IncomingHttpHeaders };
  readonly host: string;
  readonly port: number;
  readonly path: string;
  readonly headers: HeaderList;
  readonly body: Buffer | undefined;
  secret: Secret | undefined;
}

/** A provider that authenticates with a service account (docs/spec.md §9): upstream-auth.ts makes them. */
export interface UpstreamAuth {
  /** Sets the request's credentials. Called after every other change to the request. */
  authorize(x: AuthTarget): Promise<void>;
  /** The upstream answered 401: forget cached tokens. True when a retry may succeed. */
  rejected(): boolean;
  /** Whether the payload must be in memory (signed over its hash). */
  readonly needsBody: boolean;
}

/** Whose response is scrubbed: an Exchange is one. */
export interface ScrubSubject {
  readonly secret: Secret | undefined;
  readonly provider: ProviderState | undefined;
  readonly placeholder: string | undefined;
}

export interface ProviderState {
  readonly rule: ProviderRule;
  /** Resolutions of the pool's credentials at load time (for `check`, `status`, `env`). */
  readonly resolutions: readonly Resolution[];
  /** A credential resolved, or the rule file names the provider explicitly. */
  readonly intercepted: boolean;
  readonly active: boolean;
}

/**
 * A provider whose key is read by default from its placeholder variable, and whose placeholder
 * has aliases (decision 122): when the main variable has no value, the first alias that has one
 * is its credential, for as long as these rules are loaded.
 */
async function withAliasCredential(rule: ProviderRule, resolver: SecretResolver): Promise<ProviderRule> {
  const main = rule.credentials[0];
  if (rule.credentialAliases.length === 0 || main === undefined) return rule;
  if ((await resolver.resolve(main)).secret !== undefined) return rule;
  for (const alias of rule.credentialAliases) {
    if ((await resolver.resolve(alias)).secret !== undefined) return { ...rule, credentials: [alias] };
  }
  return rule;
}

/** An OAuth provider's token or revocation endpoint, where agents' own sign-ins are captured. */
export interface OAuthEndpoint {
  readonly provider: ProviderState;
  readonly role: "token" | "revoke" | "check";
  /** Origin and path, as the rule names it. */
  readonly url: string;
}

export interface ClientState {
  readonly rule: ClientRule;
  readonly token: Secret | undefined;
  /** Set when a `run --isolate` launch acts as this client (proxy/launches.ts). */
  readonly launch?: LaunchInfo;
}

export class Runtime {
  readonly rules: Rules;
  readonly resolver: SecretResolver;
  readonly placeholders: PlaceholderIndex;
  readonly providers: ReadonlyMap<string, ProviderState>;
  readonly clients: ReadonlyMap<string, ClientState>;
  /** Authorizers of service-account providers, set up by the broker (they need its agent). */
  readonly upstreamAuth = new Map<string, UpstreamAuth>();
  /** The OAuth logins of every provider, kept by the broker across reloads. */
  logins: OAuthLogins | undefined;
  /** Refreshes OAuth logins (docs/spec.md §8), set up by the broker with its agent. */
  refresher: Refresher | undefined;
  /** Recognises the phantom tokens agents hold for logins (docs/spec.md §19). */
  readonly phantoms: Phantoms;
  /** Token and revocation endpoints of OAuth-login providers, by `host:port` then path (decision 161). */
  readonly #oauthEndpoints = new Map<string, Map<string, OAuthEndpoint>>();
  /** Providers by `host:port`: one, or several sharing the host (decision 123). */
  readonly #exactHosts = new Map<string, readonly ProviderState[]>();
  /** Wildcard patterns in rule order, each with the providers that list it. */
  readonly #wildcards: { pattern: HostPattern; providers: ProviderState[] }[] = [];
  readonly #mounts: { prefix: string; provider: ProviderState }[] = [];
  /**
   * The last host looked up and what it found. A client's requests come in runs to one host (a
   * CONNECT tunnel carries one), so comparing two short strings usually stands in for building
   * a `host:port` key and hashing it, twice a request (decision 190).
   */
  #lastHost = "";
  #lastPort = -1;
  #lastProviders: readonly ProviderState[] | undefined;
  #lastEndpoints: Map<string, OAuthEndpoint> | undefined;
  readonly #scrubCache = new Map<string, ScrubPatterns>();
  /** The last patterns built for a credential object: found without building a key string. */
  readonly #scrubBySecret = new WeakMap<
    Secret,
    { provider: string; replacement: string; patterns: ScrubPatterns }
  >();

  private constructor(
    rules: Rules,
    resolver: SecretResolver,
    homeKey: Buffer,
    providers: Map<string, ProviderState>,
    clients: Map<string, ClientState>,
  ) {
    this.rules = rules;
    this.resolver = resolver;
    this.providers = providers;
    this.clients = clients;
    for (const state of providers.values()) {
      if (state.intercepted) {
        for (const host of state.rule.hosts) {
          if (host.wildcard) {
            const same = this.#wildcards.find((w) => hostPatternKey(w.pattern) === hostPatternKey(host));
            if (same === undefined) this.#wildcards.push({ pattern: host, providers: [state] });
            else same.providers.push(state);
          } else {
            const key = `${host.host}:${host.port}`;
            this.#exactHosts.set(key, [...(this.#exactHosts.get(key) ?? []), state]);
          }
        }
      }
      if (state.rule.mount !== undefined && state.rule.upstream !== undefined) {
        this.#mounts.push({ prefix: state.rule.mount, provider: state });
      }
    }
    this.#mounts.sort((a, b) => b.prefix.length - a.prefix.length);
    for (const state of providers.values()) this.#addOAuthEndpoints(state);
    this.phantoms = new Phantoms(homeKey);
    this.placeholders = new PlaceholderIndex(homeKey, [...clients.keys()], rules.providers);
  }

  /** Resolves every credential and client token once, then builds the runtime. */
  static async build(rules: Rules, resolver: SecretResolver, homeKey: Buffer): Promise<Runtime> {
    const providers = new Map<string, ProviderState>();
    await Promise.all(
      rules.providers.map(async (given) => {
        const rule = await withAliasCredential(given, resolver);
        const kind = kindOf(rule);
        const resolutions = await Promise.all(kind.loadRefs(rule).map((ref) => resolver.resolve(ref)));
        const resolved = resolutions.filter((r) => r.secret !== undefined).length;
        const active = kind.active(resolved, resolutions.length);
        providers.set(rule.id, { rule, resolutions, active, intercepted: active || !rule.fromCatalogue });
      }),
    );
    const ordered = new Map(rules.providers.map((p) => [p.id, providers.get(p.id)!]));
    const clients = new Map<string, ClientState>();
    for (const rule of rules.clients) {
      const token = rule.token === undefined ? undefined : (await resolver.resolve(rule.token)).secret;
      clients.set(rule.name, { rule, token });
    }
    return new Runtime(rules, resolver, homeKey, ordered, clients);
  }

  /**
   * The patterns that scrub this request's response: every value of the provider's pool known
   * now plus the credential used, each replaced by the client's placeholder. Cached per
   * (provider, placeholder, credential).
   */
  scrubPatterns(x: ScrubSubject): ScrubPatterns | undefined {
    if (x.secret === undefined || x.provider === undefined || !this.rules.scrubResponses) return undefined;
    const replacement = x.placeholder ?? "[REDACTED]";
    const provider = x.provider.rule.id;
    const last = this.#scrubBySecret.get(x.secret);
    if (last !== undefined && last.provider === provider && last.replacement === replacement)
      return last.patterns;
    const key = `${provider}\0${replacement}\0${x.secret.fingerprint}`;
    let patterns = this.#scrubCache.get(key);
    if (patterns === undefined) {
      const values = new Set([x.secret.reveal()]);
      const rule = x.provider.rule;
      for (const ref of [...rule.credentials, ...kindOf(rule).signingRefs(rule)]) {
        const s = this.resolver.peek(ref);
        if (s !== undefined) values.add(s.reveal());
      }
      for (const e of this.logins?.members(provider) ?? []) values.add(e.secret.reveal());
      patterns = new ScrubPatterns([...values].map((secret) => ({ secret, replacement })));
      if (this.#scrubCache.size >= 1000) this.#scrubCache.clear();
      this.#scrubCache.set(key, patterns);
    }
    this.#scrubBySecret.set(x.secret, { provider, replacement, patterns });
    return patterns;
  }

  /**
   * The providers whose hosts include `host:port` (host already normalized): usually one;
   * several when they share the host, and the request's placeholder picks (decision 123).
   */
  providersForHost(host: string, port: number): readonly ProviderState[] | undefined {
    if (host !== this.#lastHost || port !== this.#lastPort) this.#lookUp(host, port);
    return this.#lastProviders;
  }

  #lookUp(host: string, port: number): void {
    const key = `${host}:${port}`;
    let providers = this.#exactHosts.get(key);
    if (providers === undefined) {
      for (const w of this.#wildcards) {
        if (hostMatches(w.pattern, host, port)) {
          providers = w.providers;
          break;
        }
      }
    }
    this.#lastHost = host;
    this.#lastPort = port;
    this.#lastProviders = providers;
    this.#lastEndpoints = this.#oauthEndpoints.size === 0 ? undefined : this.#oauthEndpoints.get(key);
  }

  /** Token and revocation endpoints named by person-login providers: an agent's sign-in there is taken into custody. */
  #addOAuthEndpoints(state: ProviderState): void {
    if (!isOAuthRule(state.rule) || !kindOf(state.rule).personLogins || kindOf(state.rule).boundLogins)
      return;
    const o = state.rule.oauth;
    for (const [url, role] of [
      [o.tokenEndpoint, "token"],
      [o.revocationEndpoint, "revoke"],
      [o.tokenInfoEndpoint, "check"],
      [o.userinfoEndpoint, "check"],
    ] as const) {
      if (url === undefined) continue;
      const u = new URL(url);
      const key = `${u.hostname.replace(/^\[|\]$/g, "").toLowerCase()}:${u.port || (u.protocol === "http:" ? 80 : 443)}`;
      let paths = this.#oauthEndpoints.get(key);
      if (paths === undefined) {
        paths = new Map();
        this.#oauthEndpoints.set(key, paths);
      }
      if (!paths.has(u.pathname))
        paths.set(u.pathname, { provider: state, role, url: u.origin + u.pathname });
    }
  }

  /** The OAuth endpoint at `host:port` and `path` (no query), if one is taken into custody. */
  oauthEndpoint(host: string, port: number, path: string): OAuthEndpoint | undefined {
    if (this.#oauthEndpoints.size === 0) return undefined;
    if (host !== this.#lastHost || port !== this.#lastPort) this.#lookUp(host, port);
    return this.#lastEndpoints?.get(path);
  }

  /** Whether any token, revocation or check endpoint is taken into custody at `host:port`. */
  hasOAuthEndpoints(host: string, port: number): boolean {
    if (this.#oauthEndpoints.size === 0) return false;
    if (host !== this.#lastHost || port !== this.#lastPort) this.#lookUp(host, port);
    return this.#lastEndpoints !== undefined;
  }

  /** Whether a CONNECT to `host:port` is opened here: a provider's host or an OAuth endpoint's. */
  intercepts(host: string, port: number): boolean {
    return this.providerForHost(host, port) !== undefined || this.hasOAuthEndpoints(host, port);
  }

  /** The first provider whose hosts include `host:port`: whether the host is intercepted. */
  providerForHost(host: string, port: number): ProviderState | undefined {
    return this.providersForHost(host, port)?.[0];
  }

  /** The mounted provider for a reverse-mode path, and the rest of the path. */
  providerForMount(path: string): { provider: ProviderState; rest: string } | undefined {
    for (const m of this.#mounts) {
      if (path === m.prefix || path.startsWith(m.prefix + "/") || path.startsWith(m.prefix + "?")) {
        const rest = path.slice(m.prefix.length);
        return { provider: m.provider, rest: rest === "" || rest.startsWith("?") ? "/" + rest : rest };
      }
    }
    return undefined;
  }

  clientAllows(client: ClientState, provider: string): boolean {
    const allowed = client.rule.providers;
    return allowed === "*" || allowed.includes(provider);
  }

  /** The client a proxy credential names, or undefined when it does not authenticate. */
  authenticate(user: string | undefined, password: string | undefined): ClientState | undefined {
    const name = user === undefined || user === "" ? "default" : user;
    const client = this.clients.get(name);
    if (client === undefined) return undefined;
    if (client.rule.token === undefined) return client;
    if (client.token === undefined || password === undefined) return undefined;
    return sameToken(password, client.token.reveal()) ? client : undefined;
  }
}
