// Checks that need the whole rule file at once: names that must exist, things that must be
// unique, the catalogue merge, the listen address versus client tokens. They read the raw YAML
// defensively, so they run even when the schema found problems elsewhere and every problem is
// reported in one go. Whatever is malformed here is the schema's to report, and skipped.
import { hostPortKey, isLoopbackHost, parseHostPort } from "./address.js";
import { CATALOGUE_ORIGIN } from "./catalogue.js";
import { effectiveProvider } from "./effective-provider.js";
import type { PathProblem } from "./errors.js";
import { suggest } from "./errors.js";
import { hostPatternKey, parseHostPattern } from "./host-pattern.js";
import { kindOf, kindOfEntry } from "./kinds/index.js";
import { isOAuthOnly, type MergedProvider, mergeProviders } from "./provider-defaults.js";
import { CLIENT_NAME, PROVIDER_ID } from "./schema/index.js";

type Raw = Record<string, unknown>;

function isRecord(value: unknown): value is Raw {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function strings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === "string") : [];
}

export function crossCheck(raw: unknown): PathProblem[] {
  if (!isRecord(raw)) return [];
  const problems: PathProblem[] = [];
  const rawProviders = isRecord(raw.providers) ? raw.providers : {};
  const fileProviders: Record<string, Raw | null> = {};
  for (const [id, entry] of Object.entries(rawProviders)) {
    if (!PROVIDER_ID.test(id)) continue;
    if (entry === null || isRecord(entry)) fileProviders[id] = entry;
  }
  const providers = mergeProviders<Raw>(fileProviders, raw.catalogue !== false);
  const byId = new Map(providers.map((p) => [p.id, p] as const));

  checkProviders(providers, problems);
  checkProviderNames(raw, byId, problems);
  checkSources(raw, problems);
  checkResolve(raw, problems);
  checkListen(raw, problems);
  checkPolicyClients(raw, problems);
  return problems;
}

/** A policy rule scoped to `clients:` names clients the file defines (else it never applies). */
function checkPolicyClients(raw: Raw, problems: PathProblem[]): void {
  if (!isRecord(raw.providers)) return;
  const known =
    isRecord(raw.clients) && Object.keys(raw.clients).length > 0 ? Object.keys(raw.clients) : ["default"];
  for (const [id, provider] of Object.entries(raw.providers)) {
    if (!isRecord(provider) || !Array.isArray(provider.policy)) continue;
    provider.policy.forEach((rule, index) => {
      if (!isRecord(rule)) return;
      for (const action of ["deny", "approve"]) {
        const matcher = rule[action];
        if (!isRecord(matcher) || matcher.clients === undefined) continue;
        const names = typeof matcher.clients === "string" ? [matcher.clients] : strings(matcher.clients);
        names.forEach((name, i) => {
          if (!CLIENT_NAME.test(name) || known.includes(name)) return;
          const close = suggest(name, known);
          const path = ["providers", id, "policy", index, action, "clients"];
          problems.push({
            path: typeof matcher.clients === "string" ? path : [...path, i],
            message: `no client named "${name}" — ${close === undefined ? `known: ${known.join(", ")}` : `did you mean "${close}"?`}`,
          });
        });
      }
    });
  }
}

/** An MCP server's host is its alone (decision 123 does not apply to it). */
function ownsWholeHost(provider: MergedProvider<Raw>): boolean {
  return kindOfEntry(provider.input).wholeHost;
}

function owner(provider: MergedProvider<Raw>): string {
  return provider.fromCatalogue ? `provider ${provider.id} (${CATALOGUE_ORIGIN})` : `provider ${provider.id}`;
}

function overrideHint(provider: MergedProvider<Raw>): string {
  return provider.fromCatalogue
    ? ` — to replace that entry, name this provider "${provider.id}", or set catalogue: false`
    : "";
}

function checkProviders(providers: readonly MergedProvider<Raw>[], problems: PathProblem[]): void {
  const hostOwners = new Map<string, MergedProvider<Raw>[]>();
  const valueOwners = new Map<string, MergedProvider<Raw>>();
  const mountOwners = new Map<string, MergedProvider<Raw>>();
  const envOwners = new Map<string, MergedProvider<Raw>>();
  // Catalogue providers are registered first, so a clash points at the file's entry, which is
  // the one the user can change.
  const ordered = [...providers.filter((p) => p.fromCatalogue), ...providers.filter((p) => !p.fromCatalogue)];
  for (const provider of ordered) {
    const { id } = provider;
    const input = provider.input as Raw;
    const at = (...rest: PropertyKey[]): PropertyKey[] => ["providers", id, ...rest];
    // An MCP server (SPEC §15) binds its URL's host and serves its origin at the mount.
    const shape = effectiveProvider(id, input, provider.catalogueEntry);
    const { mcp, hosts, upstream } = shape;
    const mount = input.mount;
    const kind = kindOf(shape);

    if (mount !== undefined && upstream === undefined) {
      problems.push({
        path: at("mount"),
        message: 'reverse mode needs an upstream too — add upstream: "https://api.example.com"',
      });
    }
    if ((hosts === undefined || hosts.length === 0) && mount === undefined && upstream === undefined) {
      problems.push({
        path: at(),
        message: `a provider needs hosts (to intercept) or upstream (to serve it at /p/${id}) — add one of them`,
      });
    }

    hosts?.forEach((host, index) => {
      if (typeof host !== "string") return;
      let key: string;
      try {
        key = hostPatternKey(parseHostPattern(host));
      } catch {
        return; // the schema reports it
      }
      const others = hostOwners.get(key) ?? [];
      if (others.includes(provider)) {
        problems.push({
          path: at("hosts", index),
          message: `${JSON.stringify(host)} is listed twice — remove one`,
        });
        return;
      }
      // Providers may share a host: the placeholder a request carries picks one (decision
      // 123). Not an MCP server (every request to it gets its token, placeholder or not).
      const other = others.find((o) => mcp !== undefined || ownsWholeHost(o));
      if (other !== undefined) {
        problems.push({
          path: mcp !== undefined ? at("mcp") : at("hosts", index),
          message: `${JSON.stringify(host)} is already bound to ${owner(other)}; an MCP server's host belongs to it alone${overrideHint(other)}`,
        });
        return;
      }
      hostOwners.set(key, [...others, provider]);
    });

    const value = isRecord(input.placeholder) ? input.placeholder.value : undefined;
    if (typeof value === "string") {
      const other = valueOwners.get(value);
      if (other === undefined) valueOwners.set(value, provider);
      else {
        problems.push({
          path: at("placeholder", "value"),
          message: `this fixed placeholder is already ${owner(other)}'s; the placeholder tells keybroker which provider a request is for — give each provider its own`,
        });
      }
    }

    const effective = shape.mount;
    if (effective !== undefined) {
      const other = mountOwners.get(effective);
      if (other === undefined) mountOwners.set(effective, provider);
      else {
        problems.push({
          path: mount === undefined ? at() : at("mount"),
          message: `mount ${effective} is already used by ${owner(other)} — choose another mount${overrideHint(other)}`,
        });
      }
    }

    for (const env of new Set(shape.env)) {
      const envOwner = envOwners.get(env);
      if (envOwner === undefined) envOwners.set(env, provider);
      else {
        problems.push({
          path: at("placeholder", "env"),
          message: `the placeholder variable ${env} is already set for ${owner(envOwner)} — give this provider another (placeholder.env)${overrideHint(envOwner)}`,
        });
      }
    }

    if (input.oauth !== undefined && input.credentials !== undefined && !isOAuthOnly(id)) {
      problems.push({
        path: at("credentials"),
        message:
          "an OAuth provider's credentials are its logins (keybroker auth add) — remove credentials, or the oauth block",
      });
    }
    if (input.oauth !== undefined && input.auth !== undefined) {
      problems.push({
        path: at("oauth"),
        message: "a provider authenticates with either auth (a service account) or oauth — remove one",
      });
    }
    if (isOAuthOnly(id)) {
      if (!kind.poolOfLogins) {
        problems.push({
          path: at(),
          message:
            "a provider whose id ends in -oauth logs in with OAuth only — add an oauth block (token_endpoint, client_id, ...)",
        });
      }
      if (input.credentials !== undefined) {
        problems.push({
          path: at("credentials"),
          message:
            "a provider whose id ends in -oauth uses only its stored OAuth tokens — remove credentials, or rename the provider",
        });
      }
    }
  }
}

function missingProvider(name: string, ids: readonly string[]): string {
  const close = suggest(name, ids);
  return close === undefined
    ? `there is no provider ${JSON.stringify(name)} — known providers: ${ids.join(", ")}`
    : `there is no provider ${JSON.stringify(name)} — did you mean "${close}"?`;
}

function checkProviderNames(
  raw: Raw,
  byId: ReadonlyMap<string, MergedProvider<Raw>>,
  problems: PathProblem[],
): void {
  const ids = [...byId.keys()];
  const reverseCapable = (id: string): boolean => {
    const input = byId.get(id)?.input as Raw | undefined;
    return input !== undefined && typeof input.upstream === "string";
  };

  if (isRecord(raw.fallbacks)) {
    for (const [from, targets] of Object.entries(raw.fallbacks)) {
      if (!PROVIDER_ID.test(from)) continue;
      if (!byId.has(from)) {
        problems.push({ path: ["fallbacks", from], message: missingProvider(from, ids) });
        continue;
      }
      if (!reverseCapable(from)) {
        problems.push({
          path: ["fallbacks", from],
          message: `fallbacks work in reverse mode, and provider ${from} has no upstream — add providers.${from}.upstream`,
        });
      }
      if (!Array.isArray(targets)) continue;
      targets.forEach((entry, index) => {
        const to = isRecord(entry) ? entry.provider : entry;
        if (typeof to !== "string" || !PROVIDER_ID.test(to)) return;
        const path = isRecord(entry) ? ["fallbacks", from, index, "provider"] : ["fallbacks", from, index];
        if (to === from)
          problems.push({
            path,
            message: `a provider cannot fall back to itself — remove ${JSON.stringify(to)}`,
          });
        else if (!byId.has(to)) problems.push({ path, message: missingProvider(to, ids) });
        else if (!reverseCapable(to)) {
          problems.push({
            path,
            message: `provider ${to} has no upstream, so it cannot serve as a reverse-mode fallback — add providers.${to}.upstream`,
          });
        }
      });
    }
  }

  if (isRecord(raw.clients)) {
    for (const [name, client] of Object.entries(raw.clients)) {
      if (!CLIENT_NAME.test(name) || !isRecord(client) || !Array.isArray(client.providers)) continue;
      client.providers.forEach((id, index) => {
        if (typeof id === "string" && PROVIDER_ID.test(id) && !byId.has(id)) {
          problems.push({ path: ["clients", name, "providers", index], message: missingProvider(id, ids) });
        }
      });
    }
  }
}

function checkSources(raw: Raw, problems: PathProblem[]): void {
  if (!isRecord(raw.sources)) return;
  const order = strings(raw.sources.order);
  const seen = new Set<string>();
  order.forEach((source, index) => {
    if (seen.has(source)) {
      problems.push({ path: ["sources", "order", index], message: `${source} is listed twice — remove one` });
    }
    seen.add(source);
  });
  if (seen.has("infisical") && raw.sources.infisical === undefined) {
    problems.push({
      path: ["sources", "order"],
      message:
        "infisical is in the lookup order but not configured — add sources.infisical, or remove it from the order",
    });
  }
  const infisical = raw.sources.infisical;
  if (isRecord(infisical) && isRecord(infisical.auth)) {
    for (const key of ["client_id", "client_secret"]) {
      const ref = infisical.auth[key];
      if (typeof ref === "string" && ref.startsWith("infisical:")) {
        problems.push({
          path: ["sources", "infisical", "auth", key],
          message:
            "Infisical's own login cannot come from Infisical — use env:NAME, dotenv:NAME, file:PATH or cmd:...",
        });
      }
    }
  }
}

function checkResolve(raw: Raw, problems: PathProblem[]): void {
  if (!isRecord(raw.resolve)) return;
  const seen = new Map<string, string>();
  for (const key of Object.keys(raw.resolve)) {
    let normalized: string;
    try {
      const { host, port } = parseHostPort(key);
      normalized = hostPortKey(host, port);
    } catch {
      continue;
    }
    const first = seen.get(normalized);
    if (first !== undefined) {
      problems.push({
        path: ["resolve", key],
        message: `names the same host and port as ${JSON.stringify(first)} — keep one`,
      });
    } else seen.set(normalized, key);
  }
}

function checkListen(raw: Raw, problems: PathProblem[]): void {
  let host: string;
  let port: number;
  if (typeof raw.listen === "string") {
    try {
      ({ host, port } = parseHostPort(raw.listen, { allowPortZero: true }));
    } catch {
      return;
    }
  } else return; // a bare port binds 127.0.0.1
  if (isLoopbackHost(host)) return;
  const address = hostPortKey(host, port);
  const needToken = (name: string): PathProblem => ({
    path: ["listen"],
    message: `binding ${address} requires client tokens (SPEC §3.5) — add clients.${name}.token`,
  });
  const clients = isRecord(raw.clients) ? Object.entries(raw.clients) : [];
  if (clients.length === 0) {
    problems.push(needToken("<name>"));
    return;
  }
  for (const [name, client] of clients) {
    if (!isRecord(client) || client.token === undefined) problems.push(needToken(name));
  }
}
