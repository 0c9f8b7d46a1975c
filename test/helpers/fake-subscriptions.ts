// Fakes of the subscription sign-ins agents use (docs/spec.md §19), speaking each one's real endpoints
// and answer shapes on a FakeUpstream (HTTPS, any host name):
//
//   codex   auth.openai.com/oauth/{authorize,token,revoke} (the browser's sign-in, its code taken
//           only with its PKCE verifier; JSON or form; JWT access and id tokens with
//           the `https://api.openai.com/auth` claims Codex reads; the id-token exchange for an
//           API key), backend chatgpt.com/backend-api/codex/responses (chatgpt-account-id, HTTPS
//           or WebSocket) and the workspace routing discovery /backend-api/wham/accounts/check
//   claude  platform.claude.com/v1/oauth/{token,revoke} (JSON; opaque sk-ant-oat01 / ort01
//           tokens, `account`), backend api.anthropic.com/v1/messages (anthropic-beta oauth)
//   gemini  oauth2.googleapis.com/{token,tokeninfo,revoke} (form, the installed-app client
//           secret, refresh tokens never rotated), www.googleapis.com/oauth2/v2/userinfo,
//           backend cloudcode-pa.googleapis.com/v1internal:generateContent
//
// Refresh tokens of codex and claude rotate and are single-use: a reused one counts in
// `reuses` and revokes the whole grant. Every request that reached a token endpoint carrying
// something shaped like a keybroker phantom counts in `phantomsSeen` (must stay 0). Backends
// accept only access tokens currently valid.
import { createHash, generateKeyPairSync, randomBytes, sign } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { type CliResult, cliAsync, tempHome } from "./broker.js";
import type { FakeUpstream, Route } from "./upstream.js";

export type Vendor = "codex" | "claude" | "gemini";

export const CLIENT_IDS: Record<Vendor, string> = {
  codex: "app_EMoamEEZ73f0CkXaXp7hrann",
  claude: "9d1c250a-e61b-44d9-88ed-5944d1962f5e",
  gemini: "681255809395-oo8ft2oprdrnp9e3aqf6av3hmdib135j.apps.googleusercontent.com",
};
export const GEMINI_SECRET = "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";
export const ACCOUNT_ID = "acc-7d3f0e9a-1111-4c2b-9c77-00000000beef";
export const SUBSCRIPTION_HOSTS = [
  "auth.openai.com",
  "chatgpt.com",
  "platform.claude.com",
  "api.anthropic.com",
  "oauth2.googleapis.com",
  "www.googleapis.com",
  "cloudcode-pa.googleapis.com",
];

interface Grant {
  revoked: boolean;
  refresh: Map<string, boolean>;
}

export interface FakeVendor {
  /** Every token issued (access, refresh, id, exchanged API keys): the leak scan's list. */
  readonly issued: string[];
  refreshes: number;
  reuses: number;
  /** Token-endpoint requests that carried a phantom-shaped value: must stay 0. */
  phantomsSeen: number;
  /** Requests to the backend, by status. */
  readonly backend: number[];
  /** Seconds an access token lives. */
  accessTtl: number;
  /** Answer backend requests with a usage-limit error while set. */
  limited: boolean;
  /** Codex: the ChatGPT account the next sign-in is for; the accounts out of quota. */
  account: string;
  readonly limitedAccounts: Set<string>;
  /** Answer token requests with 500 while set (a passing failure). */
  failing: boolean;
  /** A finished sign-in: an authorization code the token endpoint takes once. */
  code(): string;
  /** A grant signed in before keybroker (its tokens, as the agent's file holds them). */
  login(): Record<string, unknown>;
  valid(access: string): boolean;
  /** Refuses every access token issued so far, before its `exp` (revoked by the server); refresh tokens stay good. */
  refuseAccess(): void;
  /**
   * What an agent needs printed: a backend request with a valid token is answered by the route
   * here under its key ("POST /v1/messages"), else with `{ ok, echo }` (phantom-agents.test.ts).
   */
  readonly answers: Map<string, Route>;
  /** Codex's Responses over a WebSocket: the upgrade, once the token is checked. */
  socket?: (req: IncomingMessage, socket: Socket) => void;
}

const hex = (n = 18) => randomBytes(n).toString("hex");
const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });

/** An RS256 JWT signed by the fake vendor's own key. */
export function vendorJwt(payload: Record<string, unknown>): string {
  const head = Buffer.from(JSON.stringify({ alg: "RS256", typ: "JWT", kid: "fake-1" })).toString("base64url");
  const body = Buffer.from(JSON.stringify(payload)).toString("base64url");
  const sig = sign("sha256", Buffer.from(`${head}.${body}`), privateKey).toString("base64url");
  return `${head}.${body}.${sig}`;
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
  res.end(JSON.stringify(body));
}

function params(req: IncomingMessage, body: Buffer): Record<string, string> {
  const text = body.toString();
  if (/json/.test(String(req.headers["content-type"] ?? "")))
    return JSON.parse(text) as Record<string, string>;
  return Object.fromEntries(new URLSearchParams(text));
}

/** Whether anything shaped like a keybroker phantom is in the request (URL, headers, body). */
const phantomIn = (req: IncomingMessage, body: Buffer) =>
  /kbph_|eyJrYmwiOi/.test(`${req.url ?? ""} ${JSON.stringify(req.headers)} ${body.toString()}`);

const bearer = (req: IncomingMessage) => String(req.headers.authorization ?? "").replace(/^Bearer /i, "");

/** The ChatGPT account a Codex access token (a JWT) was issued for. */
function accountOf(req: IncomingMessage): string | undefined {
  try {
    const payload = Buffer.from(bearer(req).split(".")[1] ?? "", "base64url").toString();
    const claims = JSON.parse(payload) as Record<string, Record<string, string> | undefined>;
    return claims["https://api.openai.com/auth"]?.chatgpt_account_id;
  } catch {
    return undefined;
  }
}

export function installVendor(u: FakeUpstream, vendor: Vendor): FakeVendor {
  const grants: Grant[] = [];
  const access = new Map<string, number>(); // token → expiry (ms)
  const idTokens = new Set<string>();
  const codes = new Set<string>();
  // Codes of a browser sign-in (GET /oauth/authorize): the PKCE challenge and redirect they were issued for.
  const pkce = new Map<string, { challenge: string; redirect: string }>();
  const fake: FakeVendor = {
    issued: [],
    refreshes: 0,
    reuses: 0,
    phantomsSeen: 0,
    backend: [],
    accessTtl: 3600,
    limited: false,
    account: ACCOUNT_ID,
    limitedAccounts: new Set(),
    failing: false,
    answers: new Map(),
    code() {
      const c = `code-${hex(8)}`;
      codes.add(c);
      return c;
    },
    login() {
      return issue(newGrant(), true);
    },
    valid(token) {
      const exp = access.get(token);
      return exp !== undefined && exp > Date.now();
    },
    refuseAccess() {
      access.clear();
    },
  };
  const newGrant = () => {
    const g: Grant = { revoked: false, refresh: new Map() };
    grants.push(g);
    return g;
  };
  const issue = (g: Grant, withRefresh: boolean): Record<string, unknown> => {
    const now = Math.floor(Date.now() / 1000);
    const exp = now + fake.accessTtl;
    let out: Record<string, unknown>;
    if (vendor === "codex") {
      const auth = { chatgpt_account_id: fake.account, chatgpt_plan_type: "pro", chatgpt_user_id: "user-1" };
      const at = vendorJwt({
        aud: ["https://api.openai.com/v1"],
        exp,
        iat: now,
        iss: "https://auth.openai.com",
        "https://api.openai.com/auth": auth,
        jti: hex(4),
      });
      const id = vendorJwt({
        aud: [CLIENT_IDS.codex],
        email: "dev@example.com",
        exp,
        iat: now,
        iss: "https://auth.openai.com",
        sub: "user-1",
        "https://api.openai.com/auth": auth,
      });
      idTokens.add(id);
      out = { id_token: id, access_token: at, refresh_token: `rt_${hex()}` };
    } else if (vendor === "claude") {
      out = {
        token_type: "Bearer",
        access_token: `sk-ant-oat01-${hex(30)}`,
        refresh_token: `sk-ant-ort01-${hex(30)}`,
        expires_in: fake.accessTtl,
        scope: "user:inference user:profile",
        account: { uuid: "0b7c-account", email_address: "dev@example.com" },
        organization: { uuid: "org-1", name: "Dev" },
      };
    } else {
      const id = vendorJwt({
        aud: CLIENT_IDS.gemini,
        email: "dev@example.com",
        exp,
        iat: now,
        iss: "https://accounts.google.com",
        sub: "1077",
      });
      idTokens.add(id);
      out = {
        access_token: `ya29.${hex(30)}`,
        expires_in: fake.accessTtl,
        scope: "https://www.googleapis.com/auth/cloud-platform openid",
        token_type: "Bearer",
        id_token: id,
        ...(withRefresh ? { refresh_token: `1//${hex(30)}` } : {}),
      };
    }
    access.set(out.access_token as string, exp * 1000);
    if (typeof out.refresh_token === "string") g.refresh.set(out.refresh_token, false);
    for (const k of ["access_token", "refresh_token", "id_token"])
      if (typeof out[k] === "string") fake.issued.push(out[k] as string);
    return out;
  };

  const tokenPath = vendor === "codex" ? "/oauth/token" : vendor === "claude" ? "/v1/oauth/token" : "/token";
  const revokePath =
    vendor === "codex" ? "/oauth/revoke" : vendor === "claude" ? "/v1/oauth/revoke" : "/revoke";
  u.routes.set(`POST ${tokenPath}`, (req, res, body) => {
    if (phantomIn(req, body)) fake.phantomsSeen++;
    if (fake.failing) return json(res, 500, { error: "server_error" });
    const p = params(req, body);
    if (p.client_id !== CLIENT_IDS[vendor]) return json(res, 401, { error: "invalid_client" });
    if (vendor === "gemini" && p.client_secret !== GEMINI_SECRET)
      return json(res, 401, { error: "invalid_client" });
    switch (p.grant_type) {
      case "authorization_code": {
        const code = p.code ?? "";
        const bound = pkce.get(code);
        pkce.delete(code);
        if (!codes.delete(code)) return json(res, 400, { error: "invalid_grant" });
        const verified = createHash("sha256")
          .update(p.code_verifier ?? "")
          .digest("base64url");
        if (bound !== undefined && (verified !== bound.challenge || p.redirect_uri !== bound.redirect))
          return json(res, 400, { error: "invalid_grant", error_description: "PKCE verification failed" });
        return json(res, 200, issue(newGrant(), true));
      }
      case "refresh_token": {
        fake.refreshes++;
        const rt = p.refresh_token ?? "";
        const g = grants.find((x) => x.refresh.has(rt));
        if (g === undefined || g.revoked) return json(res, 400, { error: "invalid_grant" });
        // Google keeps its refresh token; the others rotate it and take each one once.
        if (vendor === "gemini") return json(res, 200, issue(g, false));
        if (g.refresh.get(rt) === true) {
          fake.reuses++;
          g.revoked = true;
          return json(res, 400, { error: "invalid_grant", error_description: "refresh token reused" });
        }
        g.refresh.set(rt, true);
        return json(res, 200, issue(g, true));
      }
      case "urn:ietf:params:oauth:grant-type:token-exchange": {
        if (!idTokens.has(p.subject_token ?? "")) return json(res, 400, { error: "invalid_grant" });
        const key = `sk-proj-${hex(24)}`;
        fake.issued.push(key);
        return json(res, 200, { access_token: key, token_type: "Bearer" });
      }
      default:
        return json(res, 400, { error: "unsupported_grant_type" });
    }
  });
  if (vendor === "codex") {
    // The browser's part of Codex's sign-in: the user is taken as signed in at once, and the
    // browser sent back to the agent's loopback redirect with a code and the agent's state.
    u.routes.set("GET /oauth/authorize", (req, res) => {
      const q = new URL(req.url ?? "/", "https://auth.openai.com").searchParams;
      const [challenge, redirect, state] = ["code_challenge", "redirect_uri", "state"].map((k) => q.get(k));
      if (
        q.get("client_id") !== CLIENT_IDS.codex ||
        q.get("response_type") !== "code" ||
        q.get("code_challenge_method") !== "S256" ||
        !challenge ||
        !redirect ||
        !state
      )
        return json(res, 400, { error: "invalid_request" });
      const code = fake.code();
      pkce.set(code, { challenge, redirect });
      const back = new URL(redirect);
      back.searchParams.set("code", code);
      back.searchParams.set("state", state);
      res.writeHead(302, { location: back.toString() });
      res.end();
    });
  }
  u.routes.set(`POST ${revokePath}`, (req, res, body) => {
    if (phantomIn(req, body)) fake.phantomsSeen++;
    const t = params(req, body).token ?? "";
    for (const g of grants) if (g.refresh.has(t)) g.revoked = true;
    access.delete(t);
    json(res, 200, {});
  });
  const backend =
    (check: (req: IncomingMessage) => boolean, limitBody: unknown) =>
    (req: IncomingMessage, res: ServerResponse, body: Buffer) => {
      const ok = fake.valid(bearer(req)) && check(req);
      const account = req.headers["chatgpt-account-id"];
      const limited = fake.limited || (typeof account === "string" && fake.limitedAccounts.has(account));
      const status = !ok ? 401 : limited ? 429 : 200;
      fake.backend.push(status);
      const answer = fake.answers.get(`${req.method} ${(req.url ?? "/").split("?")[0]}`);
      if (status === 200 && answer !== undefined) return void answer(req, res, body);
      json(
        res,
        status,
        status === 200
          ? { ok: true, echo: bearer(req) }
          : status === 429
            ? limitBody
            : { error: { message: "invalid token" } },
      );
    };
  if (vendor === "codex") {
    u.routes.set(
      "POST /backend-api/codex/responses",
      backend(
        // The account header must name the account of the token presented.
        (req) => req.headers["chatgpt-account-id"] === accountOf(req),
        {
          error: { type: "usage_limit_reached", resets_in_seconds: 600 },
        },
      ),
    );
    // Workspace routing discovery (Codex 0.156+, codex-rs backend-client `get_accounts_check`):
    // the accounts the token's user belongs to; Codex looks for its own account id in the list
    // and stops with "selected workspace missing from routing discovery" when it is absent.
    u.routes.set(
      "GET /backend-api/wham/accounts/check",
      backend(() => true, {}),
    );
    fake.answers.set("GET /backend-api/wham/accounts/check", (req, res) => {
      const id = accountOf(req);
      json(res, 200, {
        accounts: [
          {
            id,
            name: null,
            profile_picture_url: null,
            structure: "personal",
            plan_type: "pro",
            workspace_backend_origin: "NO_CONSTRAINT",
            account_routing_override: "NO_CONSTRAINT",
          },
        ],
        account_ordering: [id],
        default_account_id: id,
      });
    });
    u.upgrades.set("/backend-api/codex/responses", (req, socket) => {
      const ok =
        fake.valid(bearer(req)) &&
        req.headers["chatgpt-account-id"] === accountOf(req) &&
        fake.socket !== undefined;
      fake.backend.push(ok ? 101 : 401);
      if (ok) return fake.socket!(req, socket);
      socket.end("HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    });
  } else if (vendor === "claude") {
    const oauthBeta = (req: IncomingMessage) =>
      String(req.headers["anthropic-beta"] ?? "").includes("oauth-2025-04-20");
    u.routes.set(
      "POST /v1/messages",
      backend(oauthBeta, { type: "error", error: { type: "rate_limit_error" } }),
    );
    // Claude Code asks for its profile without the beta header.
    u.routes.set(
      "GET /api/oauth/profile",
      backend(() => true, {}),
    );
  } else {
    // Code Assist's methods (Gemini CLI's sign-in with Google): all on the one backend check.
    for (const method of [
      "generateContent",
      "streamGenerateContent",
      "loadCodeAssist",
      "onboardUser",
      "listExperiments",
      "retrieveUserQuota",
      "countTokens",
    ])
      u.routes.set(
        `POST /v1internal:${method}`,
        backend(() => true, { error: { status: "RESOURCE_EXHAUSTED" } }),
      );
    u.routes.set(
      "GET /oauth2/v2/userinfo",
      backend(() => true, {}),
    );
    // google-auth-library's getTokenInfo POSTs the token in a form body; a GET with a query works too.
    const tokeninfo = (req: IncomingMessage, res: ServerResponse, body: Buffer) => {
      if (phantomIn(req, body)) fake.phantomsSeen++;
      const t =
        new URL(req.url ?? "/", "https://x").searchParams.get("access_token") ??
        new URLSearchParams(body.toString()).get("access_token") ??
        bearer(req);
      if (!fake.valid(t)) return json(res, 400, { error: "invalid_token" });
      json(res, 200, {
        azp: CLIENT_IDS.gemini,
        aud: CLIENT_IDS.gemini,
        scope: "openid",
        expires_in: "3599",
        email: "dev@example.com",
      });
    };
    u.routes.set("GET /tokeninfo", tokeninfo);
    u.routes.set("POST /tokeninfo", tokeninfo);
  }
  return fake;
}

/** A rule file that keeps the embedded catalogue and sends every subscription host to `u`. */
export function subscriptionRules(u: FakeUpstream, extra = ""): string {
  const resolve = SUBSCRIPTION_HOSTS.map((h) => `  "${h}:443": "127.0.0.1:${u.port}"\n`).join("");
  return `version: 1\nupstream_ca: [${JSON.stringify(u.caPath)}]\nresolve:\n${resolve}${extra}`;
}

/**
 * `keybroker auth add <provider> --no-browser --timeout 1s` in a new home with no rule file: the
 * authorization URL it printed, and how it ended (nobody comes back, so it fails, storing nothing).
 * The redirect port is the agent's own fixed one (1455, 53692), and a real agent another test file
 * runs may hold it, or (53692, in the kernel's range for outgoing connections' ports, unless
 * test/prereqs.sh could reserve it) a closed connection's TIME_WAIT: `auth add` then says it is
 * in use; try again until it is free.
 */
export async function authAddUrl(provider: string): Promise<{ url: URL; result: CliResult }> {
  const argv = ["auth", "add", provider, "--no-browser", "--timeout", "1s", "--home", tempHome()];
  let r = await cliAsync(argv);
  for (let i = 0; i < 90 && /is in use/.test(r.stderr); i++) {
    await new Promise((done) => setTimeout(done, 1000));
    r = await cliAsync(argv);
  }
  const shown = /https:\/\/\S+/.exec(r.stdout + r.stderr);
  if (shown === null) throw new Error(`auth add ${provider} printed no URL:\n${r.stdout}${r.stderr}`);
  return { url: new URL(shown[0]), result: r };
}
