// Checks that need the whole rule file at once: names that must exist, things that must be
// unique, the catalogue merge, the listen address versus client tokens. They read the file as
// the schema parsed it, section by section and entry by entry (`parseParts`), so they run even
// when the schema found problems elsewhere and every problem is reported in one go; a section
// or entry the schema refused is the schema's to report, and is skipped here (a refused
// provider's or client's name still counts as known).
import type * as z from "zod";
import { hostPortKey, isLoopbackHost, parseHostPort } from "./address.js";
import { CATALOGUE_ORIGIN } from "./catalogue.js";
import { effectiveProvider } from "./effective-provider.js";
import type { PathProblem } from "./errors.js";
import { suggest } from "./errors.js";
import { hostPatternKey, parseHostPattern } from "./host-pattern.js";
import { kindOf } from "./kinds/index.js";
import { isOAuthOnly, type MergedProvider, mergeProviders } from "./provider-defaults.js";
import { clientSchema } from "./schema/clients.js";
import { fallbackListSchema, resolveKey, resolveTarget } from "./schema/file.js";
import {
  CLIENT_NAME,
  type ClientInput,
  PROVIDER_ID,
  type ProviderInput,
  providerSchema,
  type SourcesInput,
} from "./schema/index.js";
import { sourcesSchema } from "./schema/sources.js";
import { listenSchema } from "./schema/values.js";

type Raw = Record<string, unknown>;
type Merged = MergedProvider<ProviderInput>;

function isRecord(value: unknown): value is Raw {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The value as `schema` parses it, or undefined when the schema refuses it (and reports why). */
function parsed<S extends z.ZodType>(schema: S, value: unknown): z.output<S> | undefined {
  const result = schema.safeParse(value);
  return result.success ? result.data : undefined;
}

/** The parts of a rule file the schema accepts, each on its own. */
interface Parts {
  /** Every provider entry the file names (a refused one as null), in file order. */
  readonly providers: Readonly<Record<string, ProviderInput | null>>;
  /** The provider ids whose entry the schema refused. */
  readonly refused: ReadonlySet<string>;
  /** The clients the schema accepts; `clientNames` has every client the file names. */
  readonly clients: Readonly<Record<string, ClientInput | null>>;
  readonly clientNames: readonly string[];
  readonly sources?: SourcesInput | null | undefined;
  readonly resolve?: ReadonlyMap<string, string>;
  readonly listen?: string | number;
  /** `fallbacks.<id>`: every id named, with its list when the schema accepts it. */
  readonly fallbacks: ReadonlyMap<string, z.output<typeof fallbackListSchema> | undefined>;
  readonly catalogue: boolean;
}

function parseParts(raw: Raw): Parts {
  const providers: Record<string, ProviderInput | null> = {};
  const refused = new Set<string>();
  for (const [id, entry] of Object.entries(isRecord(raw.providers) ? raw.providers : {})) {
    if (!PROVIDER_ID.test(id)) continue;
    const input = parsed(providerSchema.nullable(), entry);
    if (input === undefined) refused.add(id);
    providers[id] = input ?? null;
  }
  const clients: Record<string, ClientInput | null> = {};
  const clientNames: string[] = [];
  for (const [name, entry] of Object.entries(isRecord(raw.clients) ? raw.clients : {})) {
    if (!CLIENT_NAME.test(name)) continue;
    clientNames.push(name);
    const input = parsed(clientSchema.nullable(), entry);
    if (input !== undefined) clients[name] = input;
  }
  const resolve = new Map<string, string>();
  for (const [key, target] of Object.entries(isRecord(raw.resolve) ? raw.resolve : {})) {
    if (parsed(resolveKey, key) !== undefined && parsed(resolveTarget, target) !== undefined)
      resolve.set(key, target as string);
  }
  const fallbacks = new Map<string, z.output<typeof fallbackListSchema> | undefined>();
  for (const [from, targets] of Object.entries(isRecord(raw.fallbacks) ? raw.fallbacks : {})) {
    if (PROVIDER_ID.test(from)) fallbacks.set(from, parsed(fallbackListSchema, targets));
  }
  const listen = parsed(listenSchema, raw.listen);
  return {
    providers,
    refused,
    clients,
    clientNames,
    sources: parsed(sourcesSchema.nullish(), raw.sources),
    resolve,
    ...(listen === undefined ? {} : { listen }),
    fallbacks,
    catalogue: raw.catalogue !== false,
  };
}

export function crossCheck(raw: unknown): PathProblem[] {
  if (!isRecord(raw)) return [];
  const problems: PathProblem[] = [];
  const parts = parseParts(raw);
  const providers = mergeProviders<ProviderInput>(parts.providers, parts.catalogue);
  const byId = new Map(providers.map((p) => [p.id, p] as const));
  const accepted = providers.filter((p) => !parts.refused.has(p.id));

  checkProviders(accepted, problems);
  checkProviderNames(parts, byId, problems);
  checkSources(parts.sources ?? undefined, problems);
  checkResolve(parts.resolve, problems);
  checkListen(parts, problems);
  checkPolicyClients(parts, problems);
  return problems;
}

/** A policy rule scoped to `clients:` names clients the file defines (else it never applies). */
function checkPolicyClients(parts: Parts, problems: PathProblem[]): void {
  const known = parts.clientNames.length > 0 ? parts.clientNames : ["default"];
  for (const [id, provider] of Object.entries(parts.providers)) {
    provider?.policy?.forEach((rule, index) => {
      for (const action of ["deny", "approve"] as const) {
        const clients = rule[action]?.clients;
        if (clients === undefined) continue;
        const names = typeof clients === "string" ? [clients] : clients;
        names.forEach((name, i) => {
          if (known.includes(name)) return;
          const close = suggest(name, known);
          const path = ["providers", id, "policy", index, action, "clients"];
          problems.push({
            path: typeof clients === "string" ? path : [...path, i],
            message: `no client named "${name}" — ${close === undefined ? `known: ${known.join(", ")}` : `did you mean "${close}"?`}`,
          });
        });
      }
    });
  }
}

function owner(provider: Merged): string {
  return provider.fromCatalogue ? `provider ${provider.id} (${CATALOGUE_ORIGIN})` : `provider ${provider.id}`;
}

function overrideHint(provider: Merged): string {
  return provider.fromCatalogue
    ? ` — to replace that entry, name this provider "${provider.id}", or set catalogue: false`
    : "";
}

function checkProviders(providers: readonly Merged[], problems: PathProblem[]): void {
  const hostOwners = new Map<string, Merged[]>();
  const wholeHost = new Set<Merged>();
  const valueOwners = new Map<string, Merged>();
  const mountOwners = new Map<string, Merged>();
  const envOwners = new Map<string, Merged>();
  // Catalogue providers are registered first, so a clash points at the file's entry, which is
  // the one the user can change.
  const ordered = [...providers.filter((p) => p.fromCatalogue), ...providers.filter((p) => !p.fromCatalogue)];
  for (const provider of ordered) {
    const { id, input } = provider;
    const at = (...rest: PropertyKey[]): PropertyKey[] => ["providers", id, ...rest];
    // An MCP server (docs/spec.md §15) binds its URL's host and serves its origin at the mount.
    const shape = effectiveProvider(id, input, provider.catalogueEntry);
    const { hosts, upstream } = shape;
    const mount = input.mount;
    const kind = kindOf(shape);
    if (kind.wholeHost) wholeHost.add(provider);

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
      const key = hostPatternKey(parseHostPattern(host));
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
      const other = others.find((o) => kind.wholeHost || wholeHost.has(o));
      if (other !== undefined) {
        problems.push({
          path: kind.wholeHost ? at("mcp") : at("hosts", index),
          message: `${JSON.stringify(host)} is already bound to ${owner(other)}; an MCP server's host belongs to it alone${overrideHint(other)}`,
        });
        return;
      }
      hostOwners.set(key, [...others, provider]);
    });

    const value = input.placeholder?.value;
    if (value !== undefined) {
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

    // What the entry wrote beside the keys that chose its kind (decision 132).
    if (kind.poolOfLogins && input.credentials !== undefined && !isOAuthOnly(id)) {
      problems.push({
        path: at("credentials"),
        message:
          "an OAuth provider's credentials are its logins (keybroker auth add) — remove credentials, or the oauth block",
      });
    }
    if (kind.poolOfLogins && input.auth !== undefined) {
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

function checkProviderNames(parts: Parts, byId: ReadonlyMap<string, Merged>, problems: PathProblem[]): void {
  const ids = [...byId.keys()];
  // A refused entry is the schema's to report: whether it has an upstream is not asked.
  const reverseCapable = (id: string): boolean =>
    parts.refused.has(id) || byId.get(id)?.input.upstream !== undefined;

  for (const [from, targets] of parts.fallbacks) {
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
    targets?.forEach((entry, index) => {
      const to = typeof entry === "string" ? entry : entry.provider;
      const path =
        typeof entry === "string" ? ["fallbacks", from, index] : ["fallbacks", from, index, "provider"];
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

  for (const [name, client] of Object.entries(parts.clients)) {
    const providers = client?.providers;
    if (providers === undefined || providers === "*") continue;
    providers.forEach((id, index) => {
      if (!byId.has(id)) {
        problems.push({ path: ["clients", name, "providers", index], message: missingProvider(id, ids) });
      }
    });
  }
}

function checkSources(sources: SourcesInput | undefined, problems: PathProblem[]): void {
  if (sources === undefined) return;
  const seen = new Set<string>();
  sources.order?.forEach((source, index) => {
    if (seen.has(source)) {
      problems.push({ path: ["sources", "order", index], message: `${source} is listed twice — remove one` });
    }
    seen.add(source);
  });
  if (seen.has("infisical") && sources.infisical === undefined) {
    problems.push({
      path: ["sources", "order"],
      message:
        "infisical is in the lookup order but not configured — add sources.infisical, or remove it from the order",
    });
  }
  const auth = sources.infisical?.auth;
  for (const key of ["client_id", "client_secret"] as const) {
    if (auth?.[key].startsWith("infisical:")) {
      problems.push({
        path: ["sources", "infisical", "auth", key],
        message:
          "Infisical's own login cannot come from Infisical — use env:NAME, dotenv:NAME, file:PATH or cmd:...",
      });
    }
  }
}

function checkResolve(resolve: ReadonlyMap<string, string> | undefined, problems: PathProblem[]): void {
  const seen = new Map<string, string>();
  for (const key of resolve?.keys() ?? []) {
    const { host, port } = parseHostPort(key);
    const normalized = hostPortKey(host, port);
    const first = seen.get(normalized);
    if (first !== undefined) {
      problems.push({
        path: ["resolve", key],
        message: `names the same host and port as ${JSON.stringify(first)} — keep one`,
      });
    } else seen.set(normalized, key);
  }
}

function checkListen(parts: Parts, problems: PathProblem[]): void {
  if (typeof parts.listen !== "string") return; // a bare port binds 127.0.0.1
  const { host, port } = parseHostPort(parts.listen, { allowPortZero: true });
  if (isLoopbackHost(host)) return;
  const address = hostPortKey(host, port);
  const needToken = (name: string): PathProblem => ({
    path: ["listen"],
    message: `binding ${address} requires client tokens (docs/spec.md §3.5) — add clients.${name}.token`,
  });
  if (parts.clientNames.length === 0) {
    problems.push(needToken("<name>"));
    return;
  }
  for (const name of parts.clientNames) {
    // A client the schema refused is its to report.
    if (Object.hasOwn(parts.clients, name) && parts.clients[name]?.token === undefined)
      problems.push(needToken(name));
  }
}
