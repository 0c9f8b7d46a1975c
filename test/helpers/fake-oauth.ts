// A small OAuth authorization server that speaks RFC 8628 (device), 7636 (PKCE S256), 6749
// (refresh), 7009 (revocation) and 8414 (metadata), and behaves like the providers that hurt:
// refresh tokens rotate and are single-use, and a reused one revokes the whole grant. Its
// routes live on a FakeUpstream (HTTPS, any host name), at https://auth.example.com.
import { createHash, randomBytes } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { type Dispatcher, request } from "undici";
import type { StoredLogin } from "../../state/tokens/login.js";
import type { FakeUpstream } from "./upstream.js";

export const AUTH_HOST = "auth.example.com";
export const ISSUER = `https://${AUTH_HOST}`;

interface Grant {
  id: number;
  revoked: boolean;
  /** Refresh tokens ever issued to this grant, and whether each was used. */
  refresh: Map<string, boolean>;
  access: Set<string>;
}

export interface FakeOAuth {
  /** Every access token and refresh token issued, for the secret scan. */
  readonly issued: string[];
  /** Refresh tokens presented a second time (the field defect: must stay 0). */
  reuses: number;
  refreshes: number;
  /** Seconds an access token lives. */
  accessTtl: number;
  /** Answers for forced behaviours. */
  tokenDelayMs: number;
  oversized: boolean;
  slowDowns: number;
  deny: boolean;
  /** Device codes expire: the token endpoint answers expired_token. */
  expire: boolean;
  /** When each device-code poll arrived (ms). */
  readonly devicePolls: number[];
  /** Fields that replace those of the device authorization answer (a hostile server's). */
  deviceAnswer: Record<string, unknown>;
  /** Requests that reached the token endpoint (counted on arrival, before any stall). */
  tokenRequests: number;
  /**
   * While set, token requests wait for it; one whose client went away meanwhile, or every one
   * waiting when it resolves to "drop", is dropped unprocessed (its refresh token not used), as a
   * server does with a request never completed.
   */
  stall: Promise<unknown> | undefined;
  /** Stalled token requests whose client went away (its connection closed) while they waited. */
  stalledGone: number;
  /** client_credentials tokens issued (the secret the client must send is `clientSecret`). */
  clientTokens: string[];
  clientSecret: string;
  /** A completed login, as `auth add` would have obtained it (its grant id is `grant`). */
  login(): { access_token: string; refresh_token: string; expires_in: number; grant: number };
  /** Revokes one grant, as a user revoking one session. */
  revokeGrant(grant: number): void;
  /** The user approves a device code. */
  approve(userCode: string): void;
  /** Revokes every grant (the user revoked the app). */
  revokeAll(): void;
  valid(accessToken: string): boolean;
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
  res.end(JSON.stringify(body));
}

const token = (prefix: string) => `${prefix}-${randomBytes(18).toString("hex")}`;

export function installFakeOAuth(
  u: FakeUpstream,
  opts: { clientId?: string; clientSecret?: string } = {},
): FakeOAuth {
  const clientId = opts.clientId ?? "app_1";
  const grants: Grant[] = [];
  const devices = new Map<string, { userCode: string; approved: boolean }>();
  const codes = new Map<string, { challenge: string; redirectUri: string }>();
  const fake: FakeOAuth = {
    issued: [],
    reuses: 0,
    refreshes: 0,
    accessTtl: 3600,
    tokenDelayMs: 0,
    oversized: false,
    slowDowns: 0,
    deny: false,
    expire: false,
    devicePolls: [],
    deviceAnswer: {},
    tokenRequests: 0,
    stall: undefined,
    stalledGone: 0,
    clientTokens: [],
    clientSecret: opts.clientSecret ?? "",
    login() {
      const g = newGrant();
      return { ...issue(g), grant: g.id };
    },
    revokeGrant(id) {
      const g = grants[id];
      if (g !== undefined) g.revoked = true;
    },
    approve(userCode) {
      for (const d of devices.values()) if (d.userCode === userCode) d.approved = true;
    },
    revokeAll() {
      for (const g of grants) g.revoked = true;
    },
    valid(accessToken) {
      return grants.some((g) => !g.revoked && g.access.has(accessToken));
    },
  };

  const issue = (grant: Grant) => {
    const access = token("at");
    const refresh = token("rt");
    grant.access.add(access);
    grant.refresh.set(refresh, false);
    fake.issued.push(access, refresh);
    return { access_token: access, refresh_token: refresh, token_type: "Bearer", expires_in: fake.accessTtl };
  };
  const newGrant = () => {
    const g: Grant = { id: grants.length, revoked: false, refresh: new Map(), access: new Set() };
    grants.push(g);
    return g;
  };

  u.routes.set("GET /.well-known/oauth-authorization-server", (_req, res) =>
    json(res, 200, {
      issuer: ISSUER,
      device_authorization_endpoint: `${ISSUER}/device`,
      authorization_endpoint: `${ISSUER}/authorize`,
      token_endpoint: `${ISSUER}/token`,
      revocation_endpoint: `${ISSUER}/revoke`,
      code_challenge_methods_supported: ["S256"],
      authorization_response_iss_parameter_supported: true,
    }),
  );
  u.routes.set("POST /device", (_req, res) => {
    const deviceCode = token("dc");
    const userCode = randomBytes(4).toString("hex").toUpperCase();
    devices.set(deviceCode, { userCode, approved: false });
    json(res, 200, {
      device_code: deviceCode,
      user_code: userCode,
      verification_uri: `${ISSUER}/activate`,
      verification_uri_complete: `${ISSUER}/activate?user_code=${userCode}`,
      expires_in: 600,
      interval: 1,
      ...fake.deviceAnswer,
    });
  });
  u.routes.set("GET /authorize", (req: IncomingMessage, res) => {
    const q = new URL(req.url ?? "/", ISSUER).searchParams;
    const redirect = new URL(q.get("redirect_uri") ?? "");
    if (q.get("client_id") !== clientId || q.get("code_challenge_method") !== "S256") {
      json(res, 400, { error: "invalid_request" });
      return;
    }
    if (fake.deny) {
      redirect.searchParams.set("error", "access_denied");
    } else {
      const code = token("code");
      codes.set(code, { challenge: q.get("code_challenge") ?? "", redirectUri: redirect.toString() });
      redirect.searchParams.set("code", code);
    }
    redirect.searchParams.set("state", q.get("state") ?? "");
    redirect.searchParams.set("iss", ISSUER);
    res.writeHead(302, { location: redirect.toString() });
    res.end();
  });
  u.routes.set("POST /token", async (req, res, body) => {
    fake.tokenRequests++;
    if (fake.stall !== undefined) {
      req.socket.once("close", () => {
        fake.stalledGone++;
      });
      const how = await fake.stall;
      if (how === "drop") req.socket.destroy();
      if (req.socket.destroyed) return;
    }
    if (fake.tokenDelayMs > 0) await new Promise((r) => setTimeout(r, fake.tokenDelayMs));
    if (fake.oversized) {
      res.writeHead(200, { "content-type": "application/json" });
      const chunk = Buffer.alloc(1024 * 1024, 0x20);
      for (let i = 0; i < 50 && !res.destroyed; i++) {
        if (!res.write(chunk)) await new Promise((r) => res.once("drain", r));
      }
      res.end();
      return;
    }
    const p = new URLSearchParams(body.toString());
    // client_secret_basic (RFC 6749 §2.3.1: both parts form-urlencoded) or client_id in the body.
    const basic = /^Basic (.+)$/.exec(String(req.headers.authorization ?? ""));
    if (basic !== null) {
      const [id, secret] = Buffer.from(basic[1]!, "base64").toString().split(":").map(decodeURIComponent);
      if (id !== clientId || secret !== fake.clientSecret) return json(res, 401, { error: "invalid_client" });
      p.set("client_id", id);
    }
    if (p.get("client_id") !== clientId) return json(res, 401, { error: "invalid_client" });
    switch (p.get("grant_type")) {
      case "urn:ietf:params:oauth:grant-type:device_code": {
        fake.devicePolls.push(Date.now());
        const d = devices.get(p.get("device_code") ?? "");
        if (d === undefined || fake.expire) return json(res, 400, { error: "expired_token" });
        if (fake.slowDowns > 0) {
          fake.slowDowns--;
          return json(res, 400, { error: "slow_down" });
        }
        if (fake.deny) return json(res, 400, { error: "access_denied" });
        if (!d.approved) return json(res, 400, { error: "authorization_pending" });
        devices.delete(p.get("device_code") ?? "");
        return json(res, 200, issue(newGrant()));
      }
      case "authorization_code": {
        const c = codes.get(p.get("code") ?? "");
        codes.delete(p.get("code") ?? "");
        const verifier = p.get("code_verifier") ?? "";
        const challenge = createHash("sha256").update(verifier).digest("base64url");
        if (c === undefined || c.challenge !== challenge || c.redirectUri !== p.get("redirect_uri")) {
          return json(res, 400, { error: "invalid_grant" });
        }
        return json(res, 200, issue(newGrant()));
      }
      case "refresh_token": {
        fake.refreshes++;
        const rt = p.get("refresh_token") ?? "";
        const g = grants.find((x) => x.refresh.has(rt));
        if (g === undefined || g.revoked) return json(res, 400, { error: "invalid_grant" });
        if (g.refresh.get(rt) === true) {
          // Reuse of a rotated refresh token: the whole family is revoked.
          fake.reuses++;
          g.revoked = true;
          return json(res, 400, { error: "invalid_grant", error_description: "refresh token reused" });
        }
        g.refresh.set(rt, true);
        return json(res, 200, issue(g));
      }
      case "client_credentials": {
        if (basic === null) return json(res, 401, { error: "invalid_client" });
        const g = newGrant();
        const access = token("cc");
        g.access.add(access);
        fake.issued.push(access);
        fake.clientTokens.push(access);
        return json(res, 200, { access_token: access, token_type: "Bearer", expires_in: fake.accessTtl });
      }
      default:
        return json(res, 400, { error: "unsupported_grant_type" });
    }
  });
  u.routes.set("POST /revoke", (_req, res, body) => {
    const t = new URLSearchParams(body.toString()).get("token") ?? "";
    for (const g of grants) if (g.refresh.has(t) || g.access.has(t)) g.revoked = true;
    res.writeHead(200).end();
  });
  return fake;
}

/** The start of a rule file: `hosts` (port 443) resolved to the upstream `u`, its CA trusted, no catalogue. */
export function upstreamRules(u: FakeUpstream, hosts: readonly string[]): string {
  const resolve = hosts.map((h) => `  "${h}:443": "127.0.0.1:${u.port}"\n`).join("");
  return `version: 1\nupstream_ca: [${JSON.stringify(u.caPath)}]\nresolve:\n${resolve}catalogue: false\n`;
}

/**
 * The rule file of the OAuth tests: provider `codex-oauth` on api.openai.com, its endpoints
 * discovered from the fake at `issuer`, both hosts resolved to the upstream `u`.
 */
export function oauthRules(u: FakeUpstream, oauthExtra = ""): string {
  return `${upstreamRules(u, ["api.openai.com", AUTH_HOST])}providers:
  codex-oauth:
    hosts: [api.openai.com]
    oauth:
      issuer: https://${AUTH_HOST}
      client_id: app_1
      scopes: [openid, offline_access]
${oauthExtra}`;
}

/**
 * A login made by the fake (`fake.login()`), as `auth add` stores it, issued now; `lifetimeMs`
 * makes its access token expire sooner than the fake said.
 */
export function storedLogin(
  provider: string,
  id: string,
  t: { access_token: string; refresh_token: string; expires_in: number },
  lifetimeMs = t.expires_in * 1000,
): StoredLogin {
  const now = Date.now();
  return {
    provider,
    id,
    accessToken: t.access_token,
    refreshToken: t.refresh_token,
    expiresAt: now + lifetimeMs,
    issuedAt: now,
    createdAt: now,
    generation: 1,
    state: "ok",
  };
}

/** A chat request through the broker with the agent's placeholder, as an OAuth provider's agent sends it. */
/** The provider's chat endpoint on the fake upstream: 200 for a token the fake issued, else 401. */
export function serveChat(u: FakeUpstream, fake: FakeOAuth): void {
  u.routes.set("POST /v1/chat/completions", (req, res) => {
    const token = String(req.headers.authorization ?? "").replace(/^Bearer /, "");
    const ok = fake.valid(token);
    res.writeHead(ok ? 200 : 401, { "content-type": "application/json" });
    res.end(JSON.stringify(ok ? { ok: true } : { error: { message: "invalid token" } }));
  });
}

export async function chatThroughBroker(
  agent: Dispatcher,
  placeholder: string,
  url = "https://api.openai.com/v1/chat/completions",
) {
  const res = await request(url, {
    method: "POST",
    dispatcher: agent,
    headers: { authorization: `Bearer ${placeholder}`, "content-type": "application/json" },
    body: "{}",
  });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

/** The broker learns of a new login from a file watch: calls until the answer has `status` (10 s). */
export async function callUntil(call: () => ReturnType<typeof chatThroughBroker>, status: number) {
  const deadline = Date.now() + 10_000;
  let r = await call();
  while (r.status !== status && Date.now() < deadline) {
    await new Promise((x) => setTimeout(x, 50));
    r = await call();
  }
  return r;
}
