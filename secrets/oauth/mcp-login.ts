// `keybroker auth add <id>` for an MCP server (docs/spec.md §15): discover its authorization server,
// settle which client keybroker is there, then the code grant with PKCE and the loopback
// callback, with `resource=<server URL>` (RFC 8707) in the authorization and token requests.
// What the login was made with is kept as its binding, so the broker refreshes it (with the
// same resource) at the same server. The OAuth client for a binding is made here too.
import type * as oauth from "oauth4webapi";
import type { Dispatcher } from "undici";
import type { McpRule, OAuthRule } from "../../rules/types.js";
import type { McpBinding, McpStore } from "../../state/mcp/store.js";
import { cappedFetch } from "./capped-fetch.js";
import { discoverMcp, scopesFor } from "./mcp-discovery.js";
import { clientIdentity } from "./mcp-registration.js";
import { OAuthClient, type Tokens } from "./oauth-client.js";
import { type PkceOptions, pkceLogin, redirectUriFor } from "./pkce-login.js";

export interface McpLoginOptions extends PkceOptions {
  readonly id: string;
  readonly dispatcher: Dispatcher;
  readonly store: McpStore;
  /** The value of `oauth.client_secret`, for a configured confidential client. */
  readonly configuredSecret: () => Promise<string | undefined>;
}

/** The OAuth client of a login made with `binding`: its server, client and resource. */
export function mcpClient(
  rule: OAuthRule,
  binding: McpBinding,
  dispatcher: Dispatcher | (() => Dispatcher),
  secret: () => Promise<string | undefined>,
  server?: oauth.AuthorizationServer,
): OAuthClient {
  const spec = rule.oauth;
  const s = binding.server;
  return new OAuthClient(
    rule.id,
    {
      ...spec,
      grant: "pkce",
      issuer: s.issuer,
      authorizationEndpoint: s.authorization_endpoint,
      tokenEndpoint: s.token_endpoint,
      ...(s.revocation_endpoint === undefined ? {} : { revocationEndpoint: s.revocation_endpoint }),
      clientId: binding.clientId,
      clientAuth: binding.authMethod,
      authorizeParams: { ...spec.authorizeParams, resource: binding.resource },
      tokenParams: { ...spec.tokenParams, resource: binding.resource },
    },
    dispatcher,
    secret,
    server ?? { ...s },
  );
}

/** The secret a binding's client authenticates with: the registration's, or the configured one. */
export function bindingSecret(
  binding: McpBinding,
  store: McpStore,
  configured: () => Promise<string | undefined>,
): () => Promise<string | undefined> {
  if (binding.authMethod === "none") return async () => undefined;
  if (binding.clientSource === "configured") return configured;
  return async () => (await store.registration(binding.server.issuer))?.clientSecret;
}

export async function mcpLogin(
  rule: McpRule,
  opts: McpLoginOptions,
): Promise<{ tokens: Tokens; binding: McpBinding }> {
  const spec = rule.oauth;
  const serverUrl = new URL(rule.mcp.url);
  const fetch = cappedFetch({
    dispatcher: opts.dispatcher,
    maxBytes: spec.maxResponseBytes,
    timeoutMs: spec.tokenTimeoutMs,
    headers: spec.tokenHeaders,
  });
  const found = await discoverMcp(serverUrl, fetch, spec.issuer === undefined ? {} : { issuer: spec.issuer });
  const server: oauth.AuthorizationServer = {
    ...found.server,
    ...(spec.authorizationEndpoint === undefined
      ? {}
      : { authorization_endpoint: spec.authorizationEndpoint }),
    ...(spec.tokenEndpoint === undefined ? {} : { token_endpoint: spec.tokenEndpoint }),
    ...(spec.revocationEndpoint === undefined ? {} : { revocation_endpoint: spec.revocationEndpoint }),
  };
  const redirectUri = redirectUriFor(spec.redirectUri, opts.port).toString();
  const identity = await clientIdentity({
    spec,
    mcp: rule.mcp,
    server,
    redirectUri,
    fetch,
    store: opts.store,
    print: opts.print,
  });
  const binding: McpBinding = {
    provider: rule.id,
    id: opts.id,
    resource: serverUrl.href,
    server: {
      issuer: server.issuer,
      authorization_endpoint: server.authorization_endpoint!,
      token_endpoint: server.token_endpoint!,
      ...(server.revocation_endpoint === undefined
        ? {}
        : { revocation_endpoint: server.revocation_endpoint }),
      ...(server.authorization_response_iss_parameter_supported === undefined
        ? {}
        : {
            authorization_response_iss_parameter_supported:
              server.authorization_response_iss_parameter_supported,
          }),
    },
    clientId: identity.clientId,
    authMethod: identity.authMethod,
    clientSource: identity.source,
  };
  const base = mcpClient(
    { ...rule, oauth: { ...spec, scopes: scopesFor(spec.scopes, found) } },
    binding,
    opts.dispatcher,
    identity.secret === undefined ? opts.configuredSecret : async () => identity.secret,
    server,
  );
  const tokens = await pkceLogin(base, opts);
  return { tokens, binding };
}
