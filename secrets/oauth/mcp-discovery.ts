// How `auth add` finds an MCP server's authorization server (docs/spec.md §15, the MCP authorization
// spec): the protected resource metadata (RFC 9728) named by the `resource_metadata` of the
// server's challenge to an unauthenticated request, else at the path-aware well-known URL, then
// the root one; then the authorization server's metadata (RFC 8414 path-aware, then OpenID
// discovery), whose `issuer` must be the one asked for, and which must offer PKCE S256. Every
// request goes through the capped fetch (size cap, time limit, keybroker's upstream agent).
import * as oauth from "oauth4webapi";
import { OAuthEndpointError } from "./capped-fetch.js";

export type Fetch = (url: string, init: RequestInit) => Promise<Response>;

/** A discovery that cannot go on: what was missing or wrong, and what to configure. */
export class McpDiscoveryError extends Error {
  override name = "McpDiscoveryError";
}

export interface ResourceMetadata {
  readonly resource: string;
  readonly authorization_servers?: readonly string[];
  readonly scopes_supported?: readonly string[];
}

export interface McpDiscovery {
  /** The protected resource metadata, when the server publishes it. */
  readonly resource?: ResourceMetadata;
  /** Where it was found (for the messages of `auth add`). */
  readonly resourceMetadataUrl?: string;
  /** The `scope` of the server's challenge, when it sent one. */
  readonly challengeScope?: string;
  readonly server: oauth.AuthorizationServer;
}

/** The auth-params of the `Bearer` challenge in a WWW-Authenticate header. */
export function bearerChallenge(header: string | null): Record<string, string> | undefined {
  if (header === null) return undefined;
  const at = header.search(/(^|[\s,])Bearer(\s|$)/i);
  if (at === -1) return undefined;
  const params: Record<string, string> = {};
  const rest = header.slice(at).replace(/^[\s,]*Bearer/i, "");
  const pair = /\s*([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?/y;
  for (let m = pair.exec(rest); m !== null; m = pair.exec(rest)) {
    params[m[1]!.toLowerCase()] = m[2] === undefined ? m[3]! : m[2].replace(/\\(.)/g, "$1");
    // A new scheme (`, Basic realm=...`) ends the Bearer challenge's parameters.
    if (/^\s*[A-Za-z][A-Za-z0-9_-]*\s+[A-Za-z]/.test(rest.slice(pair.lastIndex))) break;
  }
  return params;
}

/** True when `resource` names the server's URL or a prefix of it on the same origin. */
export function resourceCovers(resource: string, serverUrl: URL): boolean {
  let r: URL;
  try {
    r = new URL(resource);
  } catch {
    return false;
  }
  if (r.origin !== serverUrl.origin) return false;
  const base = r.pathname.endsWith("/") ? r.pathname : `${r.pathname}/`;
  return serverUrl.pathname === r.pathname || serverUrl.pathname.startsWith(base);
}

const INITIALIZE = JSON.stringify({
  jsonrpc: "2.0",
  id: 0,
  method: "initialize",
  params: {
    protocolVersion: "2025-06-18",
    capabilities: {},
    clientInfo: { name: "keybroker", version: "1" },
  },
});

/** The challenge to an unauthenticated request, as an MCP client's first request meets it. */
async function challenge(serverUrl: URL, fetch: Fetch): Promise<Record<string, string> | undefined> {
  let res: Response;
  try {
    res = await fetch(serverUrl.href, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: INITIALIZE,
    });
  } catch (err) {
    // Too big or broken off: the server answered, just not with a challenge we could read.
    if (err instanceof OAuthEndpointError && !err.message.startsWith("cannot reach")) return undefined;
    throw err;
  }
  const session = res.headers.get("mcp-session-id");
  if (res.ok && session !== null) {
    // A server that never challenges opened a session for us: close it again.
    await fetch(serverUrl.href, { method: "DELETE", headers: { "mcp-session-id": session } }).catch(() => {});
  }
  return res.status === 401 ? bearerChallenge(res.headers.get("www-authenticate")) : undefined;
}

async function readResourceMetadata(
  res: Response,
  serverUrl: URL,
  where: string,
): Promise<ResourceMetadata | undefined> {
  if (res.status !== 200) return undefined;
  let json: ResourceMetadata;
  try {
    json = (await res.json()) as ResourceMetadata;
    if (typeof json !== "object" || json === null || typeof json.resource !== "string") {
      throw new Error('it has no "resource"');
    }
  } catch (err) {
    throw new McpDiscoveryError(
      `the protected resource metadata at ${where} is not valid: ${(err as Error).message}`,
    );
  }
  if (!resourceCovers(json.resource, serverUrl)) {
    throw new McpDiscoveryError(
      `the protected resource metadata at ${where} is for ${JSON.stringify(json.resource).slice(0, 200)}, not for ${serverUrl.href}`,
    );
  }
  return json;
}

async function resourceMetadata(
  serverUrl: URL,
  challengeUrl: string | undefined,
  fetch: Fetch,
): Promise<{ metadata: ResourceMetadata; url: string } | undefined> {
  const options = {
    [oauth.customFetch]: fetch as unknown as typeof globalThis.fetch,
    [oauth.allowInsecureRequests]: true,
  };
  if (challengeUrl !== undefined) {
    let url: URL;
    try {
      url = new URL(challengeUrl);
    } catch {
      throw new McpDiscoveryError(`the server's challenge names resource_metadata that is not a URL`);
    }
    if (url.protocol !== "https:" && url.origin !== serverUrl.origin) {
      throw new McpDiscoveryError(
        `the server's challenge names resource_metadata at ${url.origin}, which is not https`,
      );
    }
    const found = await readResourceMetadata(
      await fetch(url.href, { method: "GET", headers: { accept: "application/json" } }),
      serverUrl,
      url.href,
    );
    if (found === undefined)
      throw new McpDiscoveryError(
        `the protected resource metadata at ${url.href} (named by the server's challenge) could not be read`,
      );
    return { metadata: found, url: url.href };
  }
  // Path-aware first (`/.well-known/oauth-protected-resource/mcp`), then the root.
  const candidates = serverUrl.pathname === "/" ? [serverUrl] : [serverUrl, new URL(serverUrl.origin)];
  for (const candidate of candidates) {
    const res = await oauth.resourceDiscoveryRequest(new URL(candidate.origin + candidate.pathname), options);
    const found = await readResourceMetadata(res, serverUrl, res.url || candidate.href);
    if (found !== undefined) return { metadata: found, url: res.url || candidate.href };
  }
  return undefined;
}

/** RFC 8414 (path-aware), then OpenID discovery; the issuer must be the one asked for. */
export async function authorizationServerMetadata(
  issuer: string,
  fetch: Fetch,
): Promise<oauth.AuthorizationServer> {
  let url: URL;
  try {
    url = new URL(issuer);
  } catch {
    throw new McpDiscoveryError(
      `the authorization server ${JSON.stringify(issuer).slice(0, 200)} is not a URL`,
    );
  }
  const options = {
    [oauth.customFetch]: fetch as unknown as typeof globalThis.fetch,
    [oauth.allowInsecureRequests]: true,
  };
  for (const algorithm of ["oauth2", "oidc"] as const) {
    const res = await oauth.discoveryRequest(url, { ...options, algorithm });
    if (res.status !== 200) continue;
    try {
      return await oauth.processDiscoveryResponse(url, res);
    } catch (err) {
      throw new McpDiscoveryError(
        `the ${algorithm === "oauth2" ? "RFC 8414" : "OpenID"} metadata of ${issuer} is not valid (${(err as Error).message})`,
      );
    }
  }
  throw new McpDiscoveryError(
    `${issuer} publishes no authorization server metadata (neither RFC 8414 nor OpenID discovery) — set oauth.issuer to the right server, or its endpoints`,
  );
}

export interface DiscoverOptions {
  /** `oauth.issuer`: the authorization server to use, whatever the resource metadata names. */
  readonly issuer?: string;
}

export async function discoverMcp(
  serverUrl: URL,
  fetch: Fetch,
  opts: DiscoverOptions = {},
): Promise<McpDiscovery> {
  const challenged = await challenge(serverUrl, fetch);
  const found = await resourceMetadata(serverUrl, challenged?.resource_metadata, fetch);
  const issuer = opts.issuer ?? found?.metadata.authorization_servers?.[0];
  if (issuer === undefined) {
    throw new McpDiscoveryError(
      found === undefined
        ? `${serverUrl.href} publishes no protected resource metadata (RFC 9728), so its authorization server is unknown — set oauth.issuer`
        : `the protected resource metadata at ${found.url} names no authorization server — set oauth.issuer`,
    );
  }
  const server = await authorizationServerMetadata(issuer, fetch);
  if (!(server.code_challenge_methods_supported ?? []).includes("S256")) {
    throw new McpDiscoveryError(
      `the authorization server ${issuer} does not offer PKCE with S256 (code_challenge_methods_supported), which MCP requires; keybroker does not log in without it`,
    );
  }
  if (server.authorization_endpoint === undefined || server.token_endpoint === undefined) {
    throw new McpDiscoveryError(`the metadata of ${issuer} lacks authorization_endpoint or token_endpoint`);
  }
  return {
    ...(found === undefined ? {} : { resource: found.metadata, resourceMetadataUrl: found.url }),
    ...(challenged?.scope === undefined ? {} : { challengeScope: challenged.scope }),
    server,
  };
}

/**
 * The scopes to ask for (docs/spec.md §15): those configured, else the challenge's, else those the
 * resource metadata lists; `offline_access` added only when the authorization server lists it.
 */
export function scopesFor(configured: readonly string[], d: McpDiscovery): string[] {
  const scopes =
    configured.length > 0
      ? [...configured]
      : d.challengeScope !== undefined
        ? d.challengeScope.split(/\s+/).filter((s) => s !== "")
        : [...(d.resource?.scopes_supported ?? [])];
  if ((d.server.scopes_supported ?? []).includes("offline_access") && !scopes.includes("offline_access")) {
    scopes.push("offline_access");
  }
  return scopes;
}
