// Fakes of the subscription sign-ins that use the device grant (docs/spec.md §6, §19), speaking each
// one's real endpoints and answer shapes on a FakeUpstream (HTTPS, any host name):
//
//   qwen  chat.qwen.ai/api/v1/oauth2/{device/code,token} (form; the device code is bound to a
//         PKCE S256 challenge and taken only with its verifier; no `interval` in the answer; the
//         token answer names the API host in `resource_url`), backend
//         portal.qwen.ai/v1/chat/completions
//   nous  portal.nousresearch.com/api/oauth/{device/code,token} (form; a refresh carries its
//         refresh token in the `x-nous-refresh-token` header, never in the body; JWT access
//         tokens with scope inference:invoke; the answer names `inference_base_url`), backend
//         inference-api.nousresearch.com/v1/chat/completions
//
// Refresh tokens rotate and are single-use: a reused one counts in `reuses` and revokes the
// grant. Every request to the authorization server that carries something shaped like a
// keybroker phantom counts in `phantomsSeen` (must stay 0). Backends accept only access tokens
// currently valid.
import { createHash, randomBytes } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { vendorJwt } from "./fake-subscriptions.js";
import type { FakeUpstream } from "./upstream.js";

export type DeviceVendor = "qwen" | "nous";

export const DEVICE_CLIENT_IDS: Record<DeviceVendor, string> = {
  qwen: "f0304373b74a44d2b584a3fb70ca9e56",
  nous: "hermes-cli",
};
export const DEVICE_SCOPES: Record<DeviceVendor, string> = {
  qwen: "openid profile email model.completion",
  nous: "inference:invoke",
};
/** The hosts each vendor's sign-in and API use, for the rule file's `resolve`. */
export const DEVICE_HOSTS: Record<DeviceVendor, string[]> = {
  qwen: ["chat.qwen.ai", "portal.qwen.ai"],
  nous: ["portal.nousresearch.com", "inference-api.nousresearch.com"],
};

export interface FakeDeviceVendor {
  /** Every token issued: the leak scan's list. */
  readonly issued: string[];
  refreshes: number;
  reuses: number;
  phantomsSeen: number;
  /** Device-code polls that came without the right PKCE verifier (qwen). */
  badVerifiers: number;
  /** Refreshes that came with the refresh token in the body (nous wants it in the header). */
  bodyRefreshes: number;
  /** Backend answers, by status. */
  readonly backend: number[];
  /** Qwen: the host its token answers name in `resource_url`. */
  resourceUrl: string;
  /** The user approves the sign-in shown with this code. */
  approve(userCode: string): void;
  valid(access: string): boolean;
  /** Refuses every access token issued so far (revoked by the server); refresh tokens stay good. */
  refuseAccess(): void;
}

const hex = (n = 18) => randomBytes(n).toString("hex");

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
  res.end(JSON.stringify(body));
}

const phantomIn = (req: IncomingMessage, body: Buffer) =>
  /kbph_|eyJrYmwiOi/.test(`${req.url ?? ""} ${JSON.stringify(req.headers)} ${body.toString()}`);

export function installDeviceVendor(u: FakeUpstream, vendor: DeviceVendor): FakeDeviceVendor {
  const devices = new Map<string, { userCode: string; approved: boolean; challenge?: string }>();
  const refresh = new Map<string, boolean>(); // refresh token → used
  const access = new Map<string, number>(); // token → expiry (ms)
  let revoked = false;
  const fake: FakeDeviceVendor = {
    issued: [],
    refreshes: 0,
    reuses: 0,
    phantomsSeen: 0,
    badVerifiers: 0,
    bodyRefreshes: 0,
    backend: [],
    resourceUrl: "portal.qwen.ai",
    approve(userCode) {
      for (const d of devices.values()) if (d.userCode === userCode) d.approved = true;
    },
    valid(token) {
      const exp = access.get(token);
      return exp !== undefined && exp > Date.now();
    },
    refuseAccess() {
      access.clear();
    },
  };
  const issue = (): Record<string, unknown> => {
    const now = Math.floor(Date.now() / 1000);
    const ttl = 3600;
    const at =
      vendor === "nous"
        ? vendorJwt({
            iss: "https://portal.nousresearch.com",
            sub: "user-9",
            scope: "inference:invoke",
            exp: now + ttl,
            iat: now,
            jti: hex(6),
          })
        : hex(24);
    const rt = vendor === "nous" ? `nrt_${hex()}` : hex(24);
    access.set(at, (now + ttl) * 1000);
    refresh.set(rt, false);
    fake.issued.push(at, rt);
    return {
      access_token: at,
      refresh_token: rt,
      token_type: "Bearer",
      expires_in: ttl,
      ...(vendor === "qwen"
        ? { resource_url: fake.resourceUrl }
        : { scope: "inference:invoke", inference_base_url: "https://inference-api.nousresearch.com/v1" }),
    };
  };
  const base = vendor === "qwen" ? "/api/v1/oauth2" : "/api/oauth";
  const site = vendor === "qwen" ? "https://chat.qwen.ai" : "https://portal.nousresearch.com";

  u.routes.set(`POST ${base}/device/code`, (req, res, body) => {
    if (phantomIn(req, body)) fake.phantomsSeen++;
    const p = Object.fromEntries(new URLSearchParams(body.toString()));
    if (p.client_id !== DEVICE_CLIENT_IDS[vendor] || p.scope !== DEVICE_SCOPES[vendor])
      return json(res, 400, { error: "invalid_client" });
    // Qwen binds the device code to a PKCE challenge; without one it refuses to start.
    if (vendor === "qwen" && (p.code_challenge_method !== "S256" || !p.code_challenge))
      return json(res, 400, { error: "invalid_request", error_description: "code_challenge required" });
    const deviceCode = hex(16);
    const userCode = `${hex(2).toUpperCase()}-${hex(2).toUpperCase()}`;
    devices.set(deviceCode, {
      userCode,
      approved: false,
      ...(vendor === "qwen" ? { challenge: p.code_challenge } : {}),
    });
    const where = vendor === "qwen" ? `${site}/authorize` : `${site}/device/verify`;
    json(res, 200, {
      device_code: deviceCode,
      user_code: userCode,
      verification_uri: where,
      verification_uri_complete: `${where}?user_code=${userCode}${vendor === "qwen" ? "&client=qwen-code" : ""}`,
      expires_in: 900,
      ...(vendor === "nous" ? { interval: 1 } : {}),
    });
  });

  u.routes.set(`POST ${base}/token`, (req, res, body) => {
    if (phantomIn(req, body)) fake.phantomsSeen++;
    const p = Object.fromEntries(new URLSearchParams(body.toString()));
    if (p.client_id !== DEVICE_CLIENT_IDS[vendor]) return json(res, 401, { error: "invalid_client" });
    if (p.grant_type === "urn:ietf:params:oauth:grant-type:device_code") {
      const d = devices.get(p.device_code ?? "");
      if (d === undefined) return json(res, 400, { error: "invalid_grant" });
      if (d.challenge !== undefined) {
        const proof = createHash("sha256")
          .update(p.code_verifier ?? "")
          .digest("base64url");
        if (proof !== d.challenge) {
          fake.badVerifiers++;
          return json(res, 400, { error: "invalid_grant", error_description: "PKCE verification failed" });
        }
      }
      if (!d.approved) return json(res, 400, { error: "authorization_pending" });
      devices.delete(p.device_code ?? "");
      return json(res, 200, issue());
    }
    if (p.grant_type === "refresh_token") {
      fake.refreshes++;
      let rt = p.refresh_token;
      if (vendor === "nous") {
        if (rt !== undefined) {
          fake.bodyRefreshes++;
          return json(res, 400, { error: "invalid_request", error_description: "refresh token in the body" });
        }
        rt = String(req.headers["x-nous-refresh-token"] ?? "");
      }
      const used = refresh.get(rt ?? "");
      if (used === undefined || revoked) return json(res, 400, { error: "invalid_grant" });
      if (used) {
        fake.reuses++;
        revoked = true;
        return json(res, 400, { error: "invalid_grant", error_description: "refresh token reused" });
      }
      refresh.set(rt ?? "", true);
      return json(res, 200, issue());
    }
    json(res, 400, { error: "unsupported_grant_type" });
  });

  u.routes.set("POST /v1/chat/completions", (req, res) => {
    const token = String(req.headers.authorization ?? "").replace(/^Bearer /i, "");
    const status = fake.valid(token) ? 200 : 401;
    fake.backend.push(status);
    json(res, status, status === 200 ? { ok: true, echo: token } : { error: { message: "invalid token" } });
  });
  return fake;
}

/** A rule file that keeps the embedded catalogue and sends the vendor's hosts to `u`. */
export function deviceVendorRules(u: FakeUpstream, vendor: DeviceVendor): string {
  const resolve = DEVICE_HOSTS[vendor].map((h) => `  "${h}:443": "127.0.0.1:${u.port}"\n`).join("");
  return `version: 1\nupstream_ca: [${JSON.stringify(u.caPath)}]\nresolve:\n${resolve}`;
}
