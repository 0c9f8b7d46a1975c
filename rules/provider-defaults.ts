// How a rule file's providers combine with the embedded catalogue, and the defaults that depend
// on a provider's id. Shared by the cross-checks (which see the raw file) and the compiler.
import { CATALOGUE } from "./catalogue.js";
import type { ProviderInput } from "./schema/index.js";

export interface MergedProvider<T> {
  readonly id: string;
  /** The file's entry over the catalogue's (keys given in the file replace the catalogue's). */
  readonly input: T | ProviderInput;
  /** The catalogue entry of the same id, if any: the source of placeholder defaults. */
  readonly catalogueEntry?: ProviderInput;
  /** True when the file does not mention this provider. */
  readonly fromCatalogue: boolean;
}

/**
 * The providers in force: the file's, in file order (an empty entry keeps the catalogue entry as
 * it is), then the catalogue's that the file does not name, unless `useCatalogue` is false.
 */
export function mergeProviders<T extends object>(
  fileProviders: Readonly<Record<string, T | null>> | undefined,
  useCatalogue: boolean,
): MergedProvider<T>[] {
  const out: MergedProvider<T>[] = [];
  const named = new Set<string>();
  for (const [id, entry] of Object.entries(fileProviders ?? {})) {
    named.add(id);
    const catalogueEntry = Object.hasOwn(CATALOGUE, id) ? CATALOGUE[id] : undefined;
    const input = { ...(catalogueEntry ?? {}), ...(entry ?? {}) } as T | ProviderInput;
    out.push(
      catalogueEntry === undefined
        ? { id, input, fromCatalogue: false }
        : { id, input, catalogueEntry, fromCatalogue: false },
    );
  }
  if (useCatalogue) {
    for (const [id, entry] of Object.entries(CATALOGUE)) {
      if (!named.has(id)) out.push({ id, input: entry, catalogueEntry: entry, fromCatalogue: true });
    }
  }
  return out;
}

/** `azure-openai` → `AZURE_OPENAI_API_KEY`. */
export function derivedEnvName(id: string): string {
  return `${id.toUpperCase().replace(/[^A-Z0-9]/g, "_")}_API_KEY`;
}

/** A provider whose id ends in `-oauth` authenticates only with stored OAuth tokens (docs/spec.md §5). */
export function isOAuthOnly(id: string): boolean {
  return id.endsWith("-oauth");
}

/** The reverse endpoint: the given mount without a trailing slash, else `/p/<id>` when there is an upstream. */
export function effectiveMount(id: string, mount: unknown, upstream: unknown): string | undefined {
  if (typeof mount === "string") return mount.length > 3 && mount.endsWith("/") ? mount.slice(0, -1) : mount;
  return typeof upstream === "string" ? `/p/${id}` : undefined;
}

/**
 * What `mcp: <url>` binds (docs/spec.md §15): the URL's host (with its port when not 443) and its
 * origin, which the mount stands for. Undefined for a value that is not an https URL (the
 * schema reports it).
 */
export function mcpBinding(url: unknown): { host: string; upstream: string } | undefined {
  if (typeof url !== "string") return undefined;
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return undefined;
  }
  if (u.protocol === "http:") return { host: `${u.hostname}:${u.port || 80}`, upstream: u.origin };
  if (u.protocol !== "https:") return undefined;
  return { host: u.port === "" ? u.hostname : `${u.hostname}:${u.port}`, upstream: u.origin };
}

/** `codex-oauth` → `CODEX_OAUTH_ACCESS_TOKEN`: an OAuth provider's placeholder variable. */
export function derivedTokenEnvName(id: string): string {
  return `${id.toUpperCase().replace(/[^A-Z0-9]/g, "_")}_ACCESS_TOKEN`;
}

/**
 * The placeholder variables, first the main one: the entry's, else the catalogue's, else
 * the kind's derived name (`<ID>_ACCESS_TOKEN` for OAuth kinds, `<ID>_API_KEY` for the others).
 * Every one of them gets the same placeholder (decision 122).
 */
export function effectivePlaceholderEnv(
  id: string,
  placeholderEnv: unknown,
  catalogueEntry?: ProviderInput,
  /** The kind's derived variable (`kindOf(rule).derivedEnv`). */
  derive: (id: string) => string = derivedEnvName,
): readonly string[] {
  const names = (v: unknown): string[] | undefined =>
    typeof v === "string"
      ? [v]
      : Array.isArray(v)
        ? v.filter((n): n is string => typeof n === "string")
        : undefined;
  return names(placeholderEnv) ?? names(catalogueEntry?.placeholder?.env) ?? [derive(id)];
}
