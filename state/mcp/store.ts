// What `auth add` learns about an MCP server's authorization (docs/spec.md §15), kept next to the
// logins: the client registration of each authorization server, keyed by issuer (a changed
// server registers anew), and for each login the authorization server and client it was made
// with, so that the broker refreshes it at the same place with the same `resource`. The
// interface of the stores; implementations side by side: home.ts (`tokens/mcp/`), memory.ts
// (one process), redis.ts (a fleet: every broker refreshes a login any machine made).

/** A client registered dynamically (RFC 7591) at one authorization server. */
export interface McpRegistration {
  readonly issuer: string;
  readonly clientId: string;
  readonly clientSecret?: string;
  readonly authMethod: "none" | "client_secret_basic" | "client_secret_post";
  readonly redirectUris: readonly string[];
  readonly registeredAt: number;
}

/** The authorization server endpoints a login uses (from its RFC 8414 / OIDC metadata). */
export interface McpServerMetadata {
  readonly issuer: string;
  readonly authorization_endpoint: string;
  readonly token_endpoint: string;
  readonly revocation_endpoint?: string;
  readonly authorization_response_iss_parameter_supported?: boolean;
}

/** How one login was made: the binding the broker refreshes it with. */
export interface McpBinding {
  readonly provider: string;
  readonly id: string;
  /** The `resource` (RFC 8707) sent with every authorization, token and refresh request. */
  readonly resource: string;
  readonly server: McpServerMetadata;
  readonly clientId: string;
  readonly authMethod: McpRegistration["authMethod"];
  /** Where the client came from: the rule file, a metadata document, or a registration. */
  readonly clientSource: "configured" | "metadata_document" | "registered";
}

export interface McpStore {
  /** The registration kept for an authorization server, with its client secret if any. */
  registration(issuer: string): Promise<McpRegistration | undefined>;
  putRegistration(r: McpRegistration): Promise<void>;
  binding(provider: string, id: string): Promise<McpBinding | undefined>;
  /** Written before the login it belongs to, so no broker holds a login it cannot refresh. */
  putBinding(b: McpBinding): Promise<void>;
  removeBinding(provider: string, id: string): Promise<void>;
}
