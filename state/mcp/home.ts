// What `auth add` learns about an MCP server's authorization (SPEC §15), kept next to the
// logins: the client registration of each authorization server, keyed by issuer (a changed
// server registers anew), and for each login the authorization server and client it was made
// with, so that the broker refreshes it at the same place with the same `resource`. Behind a
// small interface, as the token store: the home's `tokens/mcp/` (0700, files 0600, atomic
// writes with fsync), or a fleet's Redis (fleet/redis-mcp-store.ts) so that every broker can
// refresh a login any machine made. Never read on the request path.
import { createHash } from "node:crypto";
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { ensurePrivateDir, writeFileAtomic } from "../../core/fs.js";

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

async function readJson<T>(path: string): Promise<T | undefined> {
  try {
    return JSON.parse(await readFile(path, "utf8")) as T;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT" || err instanceof SyntaxError) return undefined;
    throw err;
  }
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

/** One broker, or several on one machine: `tokens/mcp/` in the home. */
export class HomeMcpStore implements McpStore {
  readonly dir: string;

  constructor(home: string) {
    this.dir = join(home, "tokens", "mcp");
  }

  #registration(issuer: string): string {
    const key = createHash("sha256").update(issuer).digest("hex").slice(0, 32);
    return join(this.dir, "registrations", `${key}.json`);
  }

  #binding(provider: string, id: string): string {
    return join(this.dir, "logins", `${provider}~${id}.json`);
  }

  async registration(issuer: string): Promise<McpRegistration | undefined> {
    const r = await readJson<McpRegistration>(this.#registration(issuer));
    return r?.issuer === issuer && typeof r.clientId === "string" ? r : undefined;
  }

  async putRegistration(r: McpRegistration): Promise<void> {
    ensurePrivateDir(this.dir);
    ensurePrivateDir(join(this.dir, "registrations"));
    writeFileAtomic(this.#registration(r.issuer), `${JSON.stringify(r, null, 2)}\n`);
  }

  async binding(provider: string, id: string): Promise<McpBinding | undefined> {
    const b = await readJson<McpBinding>(this.#binding(provider, id));
    return b?.provider === provider && b.id === id ? b : undefined;
  }

  async putBinding(b: McpBinding): Promise<void> {
    ensurePrivateDir(this.dir);
    ensurePrivateDir(join(this.dir, "logins"));
    writeFileAtomic(this.#binding(b.provider, b.id), `${JSON.stringify(b, null, 2)}\n`);
  }

  async removeBinding(provider: string, id: string): Promise<void> {
    await rm(this.#binding(provider, id), { force: true });
  }
}
