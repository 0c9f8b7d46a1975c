// Which client keybroker is at an MCP server's authorization server (docs/spec.md §15), in this order:
// the `oauth.client_id` of the rule file; the client ID metadata document the user hosts
// (`oauth.client_metadata_url`) when the server supports them; a client registered dynamically
// (RFC 7591, `application_type: native`, a public client), kept per issuer and reused; else an
// error that says what to configure.
import * as oauth from "oauth4webapi";
import type { McpSpec, OAuthSpec } from "../../rules/types.js";
import type { McpBinding, McpRegistration, McpStore } from "../../state/mcp/store.js";
import { McpDiscoveryError } from "./mcp-discovery.js";

export type Fetch = (url: string, init: RequestInit) => Promise<Response>;

export interface ClientIdentity {
  readonly clientId: string;
  readonly authMethod: McpRegistration["authMethod"];
  readonly source: McpBinding["clientSource"];
  /** A registration's secret, when the server issued one. */
  readonly secret?: string;
}

export interface IdentityOptions {
  readonly spec: OAuthSpec;
  readonly mcp: McpSpec;
  readonly server: oauth.AuthorizationServer;
  readonly redirectUri: string;
  readonly fetch: Fetch;
  readonly store: McpStore;
  readonly print: (line: string) => void;
}

const AUTH_METHODS = new Set(["none", "client_secret_basic", "client_secret_post"]);

export async function clientIdentity(o: IdentityOptions): Promise<ClientIdentity> {
  if (o.spec.clientId !== "") {
    return { clientId: o.spec.clientId, authMethod: o.spec.clientAuth, source: "configured" };
  }
  const issuer = o.server.issuer;
  const supportsDocuments = (o.server as { client_id_metadata_document_supported?: unknown })
    .client_id_metadata_document_supported;
  if (o.mcp.clientMetadataUrl !== undefined && supportsDocuments === true) {
    return { clientId: o.mcp.clientMetadataUrl, authMethod: "none", source: "metadata_document" };
  }
  if (o.server.registration_endpoint === undefined) {
    throw new McpDiscoveryError(
      `the authorization server ${issuer} offers no dynamic client registration${o.mcp.clientMetadataUrl === undefined ? " and keybroker has no client ID metadata document" : supportsDocuments === true ? "" : " and does not accept client ID metadata documents"} — register keybroker there (redirect URI ${o.redirectUri}) and set oauth.client_id`,
    );
  }
  const kept = await o.store.registration(issuer);
  if (kept?.redirectUris.includes(o.redirectUri)) {
    return {
      clientId: kept.clientId,
      authMethod: kept.authMethod,
      source: "registered",
      ...(kept.clientSecret === undefined ? {} : { secret: kept.clientSecret }),
    };
  }
  const registered = await register(o);
  await o.store.putRegistration(registered);
  o.print(`Registered keybroker as a client of ${issuer}.`);
  return {
    clientId: registered.clientId,
    authMethod: registered.authMethod,
    source: "registered",
    ...(registered.clientSecret === undefined ? {} : { secret: registered.clientSecret }),
  };
}

async function register(o: IdentityOptions): Promise<McpRegistration> {
  const options = {
    [oauth.customFetch]: o.fetch as unknown as typeof globalThis.fetch,
    [oauth.allowInsecureRequests]: true,
  };
  const res = await oauth.dynamicClientRegistrationRequest(
    o.server,
    {
      client_name: "keybroker",
      redirect_uris: [o.redirectUri],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
      application_type: "native",
    },
    options,
  );
  // Read leniently (servers send null for the fields they leave out), but a client_id it must have.
  const client = (await res.json().catch(() => ({}))) as Record<string, unknown>;
  if (res.status !== 201 && res.status !== 200) {
    const error = typeof client.error === "string" ? client.error.slice(0, 80) : `HTTP ${res.status}`;
    const about =
      typeof client.error_description === "string" ? ` (${client.error_description.slice(0, 200)})` : "";
    throw new McpDiscoveryError(
      `the authorization server ${o.server.issuer} refused to register keybroker: ${error}${about} — register it there and set oauth.client_id`,
    );
  }
  if (typeof client.client_id !== "string" || client.client_id === "") {
    throw new McpDiscoveryError(`the registration answer of ${o.server.issuer} has no client_id`);
  }
  const method = String(
    client.token_endpoint_auth_method ?? (client.client_secret ? "client_secret_basic" : "none"),
  );
  if (!AUTH_METHODS.has(method)) {
    throw new McpDiscoveryError(
      `the authorization server ${o.server.issuer} registered keybroker with token_endpoint_auth_method ${method.slice(0, 40)}, which keybroker does not use — register it yourself and set oauth.client_id`,
    );
  }
  return {
    issuer: o.server.issuer,
    clientId: client.client_id,
    ...(typeof client.client_secret === "string" ? { clientSecret: client.client_secret } : {}),
    authMethod: method as McpRegistration["authMethod"],
    redirectUris: [o.redirectUri],
    registeredAt: Date.now(),
  };
}
