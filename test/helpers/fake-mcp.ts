// A remote MCP server behind OAuth, built from the official SDK's own parts: an McpServer on a
// StreamableHTTPServerTransport (sessions, SSE answers, the standalone GET stream, DELETE)
// behind the SDK's bearer check, with protected resource metadata (RFC 9728); and an
// authorization server made of the SDK's auth router (RFC 8414 metadata, dynamic registration,
// optionally of confidential clients, PKCE S256, resource indicators, rotating refresh tokens,
// revocation). Both listen with real TLS on one 127.0.0.1 port under their own host names (SNI
// picks the certificate) and record every request they get.
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync } from "node:fs";
import { createServer, type Server } from "node:https";
import type { AddressInfo, Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { OAuthRegisteredClientsStore } from "@modelcontextprotocol/sdk/server/auth/clients.js";
import { InvalidGrantError, InvalidTokenError } from "@modelcontextprotocol/sdk/server/auth/errors.js";
import { requireBearerAuth } from "@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js";
import type {
  AuthorizationParams,
  OAuthServerProvider,
} from "@modelcontextprotocol/sdk/server/auth/provider.js";
import {
  createOAuthMetadata,
  getOAuthProtectedResourceMetadataUrl,
  mcpAuthMetadataRouter,
  mcpAuthRouter,
} from "@modelcontextprotocol/sdk/server/auth/router.js";
import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import type { OAuthClientInformationFull, OAuthTokens } from "@modelcontextprotocol/sdk/shared/auth.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import express, { type NextFunction, type Request, type Response } from "express";
import { z } from "zod";
import { loadOrCreateCa } from "../../certs/ca.js";
import { LeafMinter } from "../../certs/leaf.js";

export const MCP_HOST = "mcp.kb.test";
export const AS_HOST = "login.kb.test";
export const MCP_URL = `https://${MCP_HOST}/mcp`;
export const ISSUER = `https://${AS_HOST}`;

export interface Seen {
  readonly host: string;
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: unknown;
}

export interface FakeMcp {
  readonly port: number;
  readonly caPath: string;
  /** Every request the authorization server got, and every one the MCP server got. */
  readonly asSeen: Seen[];
  readonly mcpSeen: Seen[];
  /** Every access and refresh token and client secret issued (for the secret scan). */
  readonly issued: string[];
  /** Lifetime in seconds of the access tokens issued from now on (default 3600). */
  accessTtl: number;
  /** Registrations from now on get a client secret (`client_secret_post`), as a confidential client. */
  confidential: boolean;
  /** Refresh tokens presented a second time: a fleet that shares its logins sends none. */
  reuses: number;
  /** The `resource` of each authorization and token request, in order. */
  readonly resources: { step: "authorize" | "code" | "refresh"; resource: string | undefined }[];
  /**
   * Gate of the `progress` tool: it sends one notification, then waits until this resolves
   * for that step (the test's client saw it), so buffering anywhere would stall it.
   */
  progressSeen: (step: number) => Promise<void>;
  /** Revokes every grant: the user withdrew keybroker's access. */
  revokeAll(): void;
  /** Forgets every access token (refresh tokens stay good), as a server that restarted. */
  dropAccessTokens(): void;
  close(): Promise<void>;
}

const token = (prefix: string) => `${prefix}-${randomBytes(18).toString("hex")}`;

export async function startFakeMcp(): Promise<FakeMcp> {
  const caDir = mkdtempSync(join(tmpdir(), "kb-mcp-ca-"));
  const ca = loadOrCreateCa(caDir);
  const minter = new LeafMinter(ca);
  const clients = new Map<string, OAuthClientInformationFull>();
  const codes = new Map<string, { client: string; params: AuthorizationParams }>();
  const access = new Map<string, { client: string; scopes: string[]; expiresAt: number; grant: number }>();
  const refresh = new Map<string, { client: string; scopes: string[]; grant: number; used: boolean }>();
  const revoked = new Set<number>();
  let grants = 0;

  const fake: FakeMcp = {
    port: 0,
    caPath: ca.certPath,
    asSeen: [],
    mcpSeen: [],
    issued: [],
    accessTtl: 3600,
    confidential: false,
    reuses: 0,
    resources: [],
    progressSeen: async () => {},
    dropAccessTokens: () => access.clear(),
    revokeAll: () => {
      for (let g = 0; g < grants; g++) revoked.add(g);
    },
    close: async () => {},
  };

  const issue = (client: string, scopes: string[], grant: number): OAuthTokens => {
    const at = token("mcp-at");
    const rt = token("mcp-rt");
    access.set(at, { client, scopes, expiresAt: Math.floor(Date.now() / 1000) + fake.accessTtl, grant });
    refresh.set(rt, { client, scopes, grant, used: false });
    fake.issued.push(at, rt);
    return {
      access_token: at,
      refresh_token: rt,
      token_type: "bearer",
      expires_in: fake.accessTtl,
      scope: scopes.join(" "),
    };
  };

  const clientsStore: OAuthRegisteredClientsStore = {
    getClient: (id) => clients.get(id),
    registerClient: (metadata) => {
      const secret = fake.confidential ? token("mcp-cs") : undefined;
      if (secret !== undefined) fake.issued.push(secret);
      const client = {
        ...metadata,
        client_id: randomUUID(),
        client_id_issued_at: Math.floor(Date.now() / 1000),
        // A server may answer with other values than asked for (RFC 7591 §3.2.1).
        ...(secret === undefined
          ? {}
          : { client_secret: secret, token_endpoint_auth_method: "client_secret_post" }),
      };
      clients.set(client.client_id, client);
      return client;
    },
  };

  const provider: OAuthServerProvider = {
    clientsStore,
    async authorize(client, params, res) {
      fake.resources.push({ step: "authorize", resource: params.resource?.href });
      const code = token("code");
      codes.set(code, { client: client.client_id, params });
      const back = new URL(params.redirectUri);
      back.searchParams.set("code", code);
      if (params.state !== undefined) back.searchParams.set("state", params.state);
      back.searchParams.set("iss", new URL(ISSUER).href);
      res.redirect(302, back.href);
    },
    async challengeForAuthorizationCode(_client, code) {
      const c = codes.get(code);
      if (c === undefined) throw new InvalidGrantError("unknown code");
      return c.params.codeChallenge;
    },
    async exchangeAuthorizationCode(client, code, _verifier, redirectUri, resource) {
      const c = codes.get(code);
      codes.delete(code);
      if (c === undefined || c.client !== client.client_id || c.params.redirectUri !== redirectUri)
        throw new InvalidGrantError("bad code");
      fake.resources.push({ step: "code", resource: resource?.href });
      return issue(client.client_id, c.params.scopes ?? [], grants++);
    },
    async exchangeRefreshToken(client, rt, _scopes, resource) {
      fake.resources.push({ step: "refresh", resource: resource?.href });
      const r = refresh.get(rt);
      if (r?.used) fake.reuses++;
      if (r === undefined || r.client !== client.client_id || r.used || revoked.has(r.grant))
        throw new InvalidGrantError("refresh token not valid");
      r.used = true;
      return issue(client.client_id, r.scopes, r.grant);
    },
    // RFC 7009: revoking either token of a grant revokes the grant (the client authenticated first).
    async revokeToken(client, { token: t }) {
      const grant = refresh.get(t)?.grant ?? access.get(t)?.grant;
      if (grant !== undefined && (refresh.get(t) ?? access.get(t))?.client === client.client_id)
        revoked.add(grant);
    },
    async verifyAccessToken(at): Promise<AuthInfo> {
      const a = access.get(at);
      if (a === undefined || revoked.has(a.grant)) throw new InvalidTokenError("token not valid");
      return { token: at, clientId: a.client, scopes: a.scopes, expiresAt: a.expiresAt };
    },
  };

  const record = (into: Seen[]) => (req: Request, _res: Response, next: NextFunction) => {
    into.push({
      host: req.hostname,
      method: req.method ?? "",
      path: req.originalUrl,
      headers: { ...req.headers },
      body: req.body,
    });
    next();
  };

  const asApp = express();
  asApp.use(express.urlencoded({ extended: false }), express.json(), record(fake.asSeen));
  asApp.use(
    mcpAuthRouter({
      provider,
      issuerUrl: new URL(ISSUER),
      scopesSupported: ["notes", "offline_access"],
      authorizationOptions: { rateLimit: false },
      tokenOptions: { rateLimit: false },
      clientRegistrationOptions: { rateLimit: false },
      revocationOptions: { rateLimit: false },
    }),
  );

  const mcpApp = express();
  mcpApp.use(express.json(), record(fake.mcpSeen));
  mcpApp.use(
    mcpAuthMetadataRouter({
      oauthMetadata: createOAuthMetadata({
        provider,
        issuerUrl: new URL(ISSUER),
        scopesSupported: ["notes", "offline_access"],
      }),
      resourceServerUrl: new URL(MCP_URL),
      scopesSupported: ["notes"],
    }),
  );
  // A challenge too large for keybroker to hold (over 64 KiB): it streams, and must still reach
  // the agent without its WWW-Authenticate.
  mcpApp.all("/big-challenge", (req: Request, res: Response) => {
    res.statusCode = Number(new URL(req.originalUrl, MCP_URL).searchParams.get("status") ?? 401);
    res.setHeader(
      "www-authenticate",
      `Bearer error="invalid_token", resource_metadata="${getOAuthProtectedResourceMetadataUrl(new URL(MCP_URL))}"`,
    );
    res.setHeader("content-type", "text/plain");
    res.end("x".repeat(100 * 1024));
  });
  const bearer = requireBearerAuth({
    verifier: provider,
    resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(new URL(MCP_URL)),
  });
  const transports = new Map<string, StreamableHTTPServerTransport>();
  const session = (sessionId: string | undefined) =>
    sessionId === undefined ? undefined : transports.get(sessionId);

  const newServer = (): McpServer => {
    const server = new McpServer({ name: "notes", version: "1.0.0" });
    server.registerTool(
      "echo",
      { description: "Says it back", inputSchema: { text: z.string() } },
      async ({ text }) => ({ content: [{ type: "text", text: `echo: ${text}` }] }),
    );
    server.registerTool(
      "progress",
      { description: "Counts to three, one progress notification per step" },
      async (extra) => {
        const progressToken = extra._meta?.progressToken;
        for (let step = 1; step <= 3; step++) {
          if (progressToken !== undefined) {
            await extra.sendNotification({
              method: "notifications/progress",
              params: { progressToken, progress: step, total: 3, message: `step ${step}` },
            });
          }
          // The next step waits for the client to have seen this one (or gives up).
          const seen = await Promise.race([
            fake.progressSeen(step).then(() => true),
            new Promise<boolean>((r) => setTimeout(() => r(false), 5000).unref()),
          ]);
          if (!seen) return { content: [{ type: "text", text: `stalled at step ${step}` }] };
        }
        return { content: [{ type: "text", text: "counted to 3" }] };
      },
    );
    server.registerTool("announce", { description: "Tells every client its tools changed" }, async () => {
      server.sendToolListChanged();
      return { content: [{ type: "text", text: "announced" }] };
    });
    return server;
  };

  mcpApp.all("/mcp", bearer, async (req: Request, res: Response) => {
    const id = req.headers["mcp-session-id"];
    let transport = session(typeof id === "string" ? id : undefined);
    if (transport === undefined) {
      if (req.method !== "POST" || !isInitializeRequest(req.body)) {
        res.status(400).json({ jsonrpc: "2.0", error: { code: -32000, message: "no session" }, id: null });
        return;
      }
      const created = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (sid) => {
          transports.set(sid, created);
        },
      });
      created.onclose = () => {
        if (created.sessionId !== undefined) transports.delete(created.sessionId);
      };
      await newServer().connect(created);
      transport = created;
    }
    await transport.handleRequest(req, res, req.body);
  });

  const fallback = minter.mint("localhost");
  const server: Server = createServer(
    {
      SNICallback: (name, cb) => cb(null, minter.secureContext(name)),
      cert: fallback.certPem,
      key: fallback.keyPem,
    },
    (req, res) => {
      const host = String(req.headers.host ?? "").replace(/:\d+$/, "");
      (host === AS_HOST ? asApp : mcpApp)(req, res);
    },
  );
  const sockets = new Set<Socket>();
  server.on("secureConnection", (s: Socket) => {
    sockets.add(s);
    s.once("close", () => sockets.delete(s));
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return Object.assign(fake, {
    port: (server.address() as AddressInfo).port,
    close: async () => {
      for (const t of transports.values()) await t.close().catch(() => {});
      server.closeAllConnections();
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  });
}

/** The rule file: provider `notes` for the fake server, both host names resolved to it. */
export function mcpRules(fake: FakeMcp, extra = ""): string {
  return `version: 1
upstream_ca: [${JSON.stringify(fake.caPath)}]
resolve:
  "${MCP_HOST}:443": "127.0.0.1:${fake.port}"
  "${AS_HOST}:443": "127.0.0.1:${fake.port}"
catalogue: false
providers:
  notes:
    mcp: ${MCP_URL}
    oauth: { token_timeout: 5s }
${extra}`;
}

/** sha256 of a value, to name a token in an assertion without printing it. */
export function fingerprint(value: string): string {
  return createHash("sha256").update(value).digest("hex").slice(0, 12);
}
