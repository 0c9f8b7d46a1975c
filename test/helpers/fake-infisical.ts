// A fake Infisical on 127.0.0.1 (plain HTTP, real sockets) that speaks what @infisical/sdk 5
// calls: universal-auth login, token renewal, listing a folder's secrets (with imports) and
// reading one secret. Access tokens are JWT-shaped with `iat`/`exp`, like the real ones. Tests
// change secrets, revoke tokens, make it fail or hang, and read what it was asked.

import { randomBytes, randomUUID } from "node:crypto";
import { once } from "node:events";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface FakeInfisicalRequest {
  readonly method: string;
  /** The path without the query, e.g. `/api/v3/secrets/raw/OPENAI_API_KEY`. */
  readonly path: string;
  readonly query: Readonly<Record<string, string>>;
  readonly authorization: string | undefined;
  readonly body: string;
}

export type FakeMode = "up" | "failing" | "hanging";

export interface FakeInfisical {
  readonly url: string;
  readonly port: number;
  readonly clientId: string;
  readonly clientSecret: string;
  readonly projectId: string;
  readonly environment: string;
  readonly requests: FakeInfisicalRequest[];
  /** Every access token issued, for the leak scan. */
  readonly tokens: string[];
  /** Lifetime of the tokens it issues from now on. */
  tokenTtlSeconds: number;
  /** `failing`: every request gets 503. `hanging`: requests get no answer until `release()`. */
  mode: FakeMode;
  /** `/agents/OPENAI_API_KEY` → value. */
  setSecret(path: string, value: string): void;
  deleteSecret(path: string): void;
  /** `folder` imports the secrets of `from` (as Infisical's secret imports do). */
  addImport(folder: string, from: string): void;
  /** Invalidates every token issued so far: the next call with one gets 401. */
  revokeTokens(): void;
  /** Answers the requests held while hanging, and is up again. */
  release(): void;
  /** Resolves with the next request that `match` accepts (past ones included when `fromIndex` is given). */
  nextRequest(match: (r: FakeInfisicalRequest) => boolean, fromIndex?: number): Promise<FakeInfisicalRequest>;
  /** Stops listening: connections are refused from now on. */
  close(): Promise<void>;
}

export interface FakeInfisicalOptions {
  readonly clientId?: string;
  readonly clientSecret?: string;
  readonly projectId?: string;
  readonly environment?: string;
  readonly tokenTtlSeconds?: number;
}

interface Stored {
  readonly id: string;
  value: string;
  version: number;
}

function base64url(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString("base64url");
}

function splitPath(path: string): { folder: string; name: string } {
  const slash = path.lastIndexOf("/");
  return { folder: slash <= 0 ? "/" : path.slice(0, slash), name: path.slice(slash + 1) };
}

function normalizeFolder(folder: string | undefined): string {
  if (folder === undefined || folder === "") return "/";
  const trimmed = folder.replace(/\/+$/, "");
  return trimmed === "" ? "/" : trimmed;
}

export async function startFakeInfisical(opts: FakeInfisicalOptions = {}): Promise<FakeInfisical> {
  const clientId = opts.clientId ?? `client-id-${randomUUID()}`;
  const clientSecret = opts.clientSecret ?? `client-secret-${randomBytes(16).toString("hex")}`;
  const projectId = opts.projectId ?? "proj-6f1c";
  const environment = opts.environment ?? "dev";
  const folders = new Map<string, Map<string, Stored>>();
  const imports = new Map<string, string[]>();
  const valid = new Map<string, number>(); // token → expiry (epoch ms)
  const held: (() => void)[] = [];
  const waiters: {
    match: (r: FakeInfisicalRequest) => boolean;
    resolve: (r: FakeInfisicalRequest) => void;
  }[] = [];

  const fake: FakeInfisical = {
    url: "",
    port: 0,
    clientId,
    clientSecret,
    projectId,
    environment,
    requests: [],
    tokens: [],
    tokenTtlSeconds: opts.tokenTtlSeconds ?? 3600,
    mode: "up",
    setSecret(path, value) {
      const { folder, name } = splitPath(path);
      let secrets = folders.get(folder);
      if (secrets === undefined) {
        secrets = new Map();
        folders.set(folder, secrets);
      }
      const existing = secrets.get(name);
      if (existing === undefined) secrets.set(name, { id: randomUUID(), value, version: 1 });
      else {
        existing.value = value;
        existing.version++;
      }
    },
    deleteSecret(path) {
      const { folder, name } = splitPath(path);
      folders.get(folder)?.delete(name);
    },
    addImport(folder, from) {
      imports.set(folder, [...(imports.get(folder) ?? []), from]);
    },
    revokeTokens() {
      valid.clear();
    },
    release() {
      fake.mode = "up";
      for (const answer of held.splice(0)) answer();
    },
    nextRequest(match, fromIndex) {
      if (fromIndex !== undefined) {
        const past = fake.requests.slice(fromIndex).find(match);
        if (past !== undefined) return Promise.resolve(past);
      }
      return new Promise((resolve) => waiters.push({ match, resolve }));
    },
    close: async () => {
      for (const answer of held.splice(0)) answer();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };

  function issueToken(): {
    accessToken: string;
    expiresIn: number;
    accessTokenMaxTTL: number;
    tokenType: string;
  } {
    const iat = Math.floor(Date.now() / 1000);
    const ttl = fake.tokenTtlSeconds;
    const accessToken = [
      base64url({ alg: "HS256", typ: "JWT" }),
      base64url({
        identityId: "identity-1",
        identityAccessTokenId: randomUUID(),
        authTokenType: "identityAccessToken",
        iat,
        exp: iat + ttl,
      }),
      randomBytes(32).toString("base64url"),
    ].join(".");
    valid.set(accessToken, Date.now() + ttl * 1000);
    fake.tokens.push(accessToken);
    return { accessToken, expiresIn: ttl, accessTokenMaxTTL: 2_592_000, tokenType: "Bearer" };
  }

  function tokenValid(authorization: string | undefined): boolean {
    const token = authorization?.replace(/^Bearer /, "");
    const expiry = token === undefined ? undefined : valid.get(token);
    return expiry !== undefined && Date.now() < expiry;
  }

  function secretJson(folder: string, name: string, stored: Stored) {
    return {
      id: stored.id,
      _id: stored.id,
      workspace: projectId,
      workspaceId: projectId,
      environment,
      version: stored.version,
      type: "shared",
      secretKey: name,
      secretValue: stored.value,
      secretComment: "",
      secretPath: folder,
      secretValueHidden: false,
      isRotatedSecret: false,
      secretReminderNote: null,
      secretReminderRepeatDays: null,
      skipMultilineEncoding: false,
      tags: [],
      createdAt: "2026-01-01T00:00:00.000Z",
      updatedAt: "2026-01-01T00:00:00.000Z",
    };
  }

  function folderSecrets(folder: string) {
    return [...(folders.get(folder) ?? new Map<string, Stored>()).entries()].map(([name, stored]) =>
      secretJson(folder, name, stored),
    );
  }

  function send(res: ServerResponse, status: number, body: unknown): void {
    const text = JSON.stringify(body);
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
    res.end(text);
  }

  function error(res: ServerResponse, status: number, message: string, name: string): void {
    send(res, status, { requestId: randomUUID(), statusCode: status, message, error: name });
  }

  function answer(req: FakeInfisicalRequest, res: ServerResponse): void {
    if (fake.mode === "failing") {
      error(res, 503, "Service temporarily unavailable", "ServiceUnavailable");
      return;
    }
    if (req.method === "POST" && req.path === "/api/v1/auth/universal-auth/login") {
      let body: { clientId?: string; clientSecret?: string } = {};
      try {
        body = JSON.parse(req.body) as typeof body;
      } catch {}
      if (body.clientId !== clientId || body.clientSecret !== clientSecret) {
        error(res, 401, "Invalid credentials", "UnauthorizedError");
        return;
      }
      send(res, 200, issueToken());
      return;
    }
    if (req.method === "POST" && req.path === "/api/v1/auth/token/renew") {
      let body: { accessToken?: string } = {};
      try {
        body = JSON.parse(req.body) as typeof body;
      } catch {}
      if (!tokenValid(`Bearer ${body.accessToken ?? ""}`)) {
        error(res, 401, "Failed to renew access token: token expired or revoked", "UnauthorizedError");
        return;
      }
      valid.delete(body.accessToken ?? "");
      send(res, 200, issueToken());
      return;
    }
    if (req.method !== "GET" || !req.path.startsWith("/api/v3/secrets/raw")) {
      error(res, 404, `Route ${req.method}:${req.path} not found`, "NotFound");
      return;
    }
    if (!tokenValid(req.authorization)) {
      error(res, 401, "Token expired or revoked", "UnauthorizedError");
      return;
    }
    const q = req.query;
    if (q.workspaceId !== projectId || q.environment !== environment) {
      error(res, 404, `Environment with slug '${q.environment ?? ""}' in project not found`, "NotFound");
      return;
    }
    const folder = normalizeFolder(q.secretPath);
    // The SDK spells the flag include_imports when listing and includeImports when reading one.
    const withImports = q.include_imports === "true" || q.includeImports === "true";
    const imported = withImports ? (imports.get(folder) ?? []) : [];
    if (req.path === "/api/v3/secrets/raw") {
      send(res, 200, {
        secrets: folderSecrets(folder),
        ...(withImports
          ? {
              imports: imported.map((from) => ({
                secretPath: from,
                environment,
                folderId: randomUUID(),
                secrets: folderSecrets(from),
              })),
            }
          : {}),
      });
      return;
    }
    const name = decodeURIComponent(req.path.slice("/api/v3/secrets/raw/".length));
    for (const where of [folder, ...imported]) {
      const stored = folders.get(where)?.get(name);
      if (stored !== undefined) {
        send(res, 200, { secret: secretJson(where, name, stored) });
        return;
      }
    }
    error(res, 404, `Secret with name '${name}' not found`, "NotFound");
  }

  const server: Server = createServer((incoming: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    incoming.on("data", (c: Buffer) => chunks.push(c));
    incoming.on("end", () => {
      const url = new URL(incoming.url ?? "/", "http://fake");
      const req: FakeInfisicalRequest = {
        method: incoming.method ?? "",
        path: url.pathname,
        query: Object.fromEntries(url.searchParams),
        authorization: incoming.headers.authorization,
        body: Buffer.concat(chunks).toString("utf8"),
      };
      fake.requests.push(req);
      for (const w of waiters.splice(0)) {
        if (w.match(req)) w.resolve(req);
        else waiters.push(w);
      }
      if (fake.mode === "hanging") held.push(() => answer(req, res));
      else answer(req, res);
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const port = (server.address() as AddressInfo).port;
  return Object.assign(fake, { port, url: `http://127.0.0.1:${port}` });
}
