// A real authorization server for the OAuth tests: oidc-provider (a certified OpenID/OAuth 2
// server) on loopback TLS, with the device grant, the code grant with PKCE, rotating refresh
// tokens (a reused one revokes the grant), revocation and discovery. Its issuer is
// https://idp.test:<port>; the broker reaches it by the rule file's `resolve` and trusts it by
// `upstream_ca`. `browse` is the user's browser: it follows redirects with cookies and submits
// the server's own login, consent and device pages (devInteractions accepts any login).
import { mkdtempSync, readFileSync } from "node:fs";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Provider from "oidc-provider";
import { Agent, request } from "undici";
import { loadOrCreateCa } from "../../certs/ca.js";
import { LeafMinter } from "../../certs/leaf.js";

export const IDP_HOST = "idp.test";
export const CLIENT_ID = "kb-agent";

export interface OidcServer {
  readonly issuer: string;
  readonly port: number;
  readonly caPath: string;
  /** Every access and refresh token the token endpoint issued, for the secret scan. */
  readonly issued: string[];
  /** Successful refresh grants. */
  refreshes: number;
  /** Refresh tokens presented again after rotation (each revokes its grant): must stay 0. */
  reuses: number;
  /** The token endpoint's errors, e.g. "invalid_grant: refresh token already used". */
  readonly errors: string[];
  /** Whether the server would accept this access token now (its own lookup). */
  valid(accessToken: string): Promise<boolean>;
  /** Whether the server still holds this refresh token (revocation deletes it). */
  refreshValid(refreshToken: string): Promise<boolean>;
  /** The user's browser at `url` until it is sent to a non-server address (returned) or a page without a form. */
  browse(url: string): Promise<string | undefined>;
  close(): Promise<void>;
}

export async function startOidcServer(opts: {
  redirectUris: string[];
  accessTtl: number;
}): Promise<OidcServer> {
  const dir = mkdtempSync(join(tmpdir(), "kb-idp-"));
  const ca = loadOrCreateCa(dir);
  const minter = new LeafMinter(ca);
  const leaf = minter.mint(IDP_HOST);
  const server: Server = createServer({ cert: leaf.certPem, key: leaf.keyPem });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const port = (server.address() as AddressInfo).port;
  const issuer = `https://${IDP_HOST}:${port}`;
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: CLIENT_ID,
        token_endpoint_auth_method: "none",
        application_type: "native",
        grant_types: ["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"],
        response_types: ["code"],
        redirect_uris: opts.redirectUris,
      },
    ],
    cookies: { keys: ["kb-test-cookie-key"] },
    features: {
      devInteractions: { enabled: true },
      deviceFlow: { enabled: true },
      revocation: { enabled: true },
    },
    pkce: { required: () => true },
    rotateRefreshToken: () => true,
    ttl: { AccessToken: opts.accessTtl, RefreshToken: 3600, DeviceCode: 600, Grant: 3600, Session: 3600 },
    findAccount: (_ctx: unknown, id: string) => ({ accountId: id, claims: () => ({ sub: id }) }),
  });
  const handler = provider.callback();
  server.on("request", handler);
  const sockets = new Set<import("node:net").Socket>();
  server.on("secureConnection", (s: import("node:net").Socket) => {
    sockets.add(s);
    s.once("close", () => sockets.delete(s));
  });

  const idp: OidcServer = {
    issuer,
    port,
    caPath: ca.certPath,
    issued: [],
    refreshes: 0,
    reuses: 0,
    errors: [],
    async valid(token) {
      return (await provider.AccessToken.find(token)) !== undefined;
    },
    async refreshValid(token) {
      return (await provider.RefreshToken.find(token)) !== undefined;
    },
    browse: (url) => browse(url, issuer, ca.certPath),
    async close() {
      server.closeAllConnections();
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  provider.on("grant.success", (ctx) => {
    const body = ctx.body ?? {};
    for (const k of ["access_token", "refresh_token"]) {
      if (typeof body[k] === "string") idp.issued.push(body[k] as string);
    }
    if (ctx.oidc?.params?.grant_type === "refresh_token") idp.refreshes++;
  });
  provider.on("grant.error", (_ctx, err) => {
    // error_detail is the server's own reason ("refresh token already used"); it never leaves it.
    const e = err as Error & { error?: string; error_detail?: string };
    idp.errors.push(`${e.error}: ${e.error_detail ?? e.message}`);
    if (/already used/.test(e.error_detail ?? "")) idp.reuses++;
  });
  return idp;
}

/** The first form of an HTML page: its action, method and fields (empty ones filled in). */
function parseForm(html: string): { action: string; fields: URLSearchParams } | undefined {
  const form = /<form\b[^>]*\baction="([^"]*)"[^>]*>([\s\S]*?)<\/form>/i.exec(html);
  if (form === null) return undefined;
  const fields = new URLSearchParams();
  for (const input of form[2]!.matchAll(/<input\b([^>]*)>/gi)) {
    const name = /\bname="([^"]*)"/.exec(input[1]!)?.[1];
    if (name === undefined) continue;
    const value = /\bvalue="([^"]*)"/.exec(input[1]!)?.[1] ?? "";
    fields.set(name, value !== "" ? value : name === "login" ? "alice" : "any-password");
  }
  return { action: form[1]!.replaceAll("&amp;", "&"), fields };
}

async function browse(start: string, issuer: string, caPath: string): Promise<string | undefined> {
  const dispatcher = new Agent({
    connect: {
      ca: readFileSync(caPath, "utf8"),
      lookup: (_host, _o, cb) => cb(null, [{ address: "127.0.0.1", family: 4 }]),
    },
  });
  const jar = new Map<string, string>();
  let url = new URL(start);
  let method = "GET";
  let body: string | undefined;
  try {
    for (let step = 0; step < 30; step++) {
      if (url.origin !== issuer) return url.toString();
      const cookie = [...jar].map(([k, v]) => `${k}=${v}`).join("; ");
      const res = await request(url, {
        method: method as "GET" | "POST",
        dispatcher,
        headers: {
          ...(cookie === "" ? {} : { cookie }),
          ...(body === undefined ? {} : { "content-type": "application/x-www-form-urlencoded" }),
        },
        ...(body === undefined ? {} : { body }),
      });
      const setCookie = res.headers["set-cookie"];
      for (const c of Array.isArray(setCookie) ? setCookie : setCookie === undefined ? [] : [setCookie]) {
        const [pair] = c.split(";");
        const eq = pair!.indexOf("=");
        jar.set(pair!.slice(0, eq), pair!.slice(eq + 1));
      }
      const text = await res.body.text();
      if (res.statusCode >= 300 && res.statusCode < 400) {
        url = new URL(String(res.headers.location), url);
        method = "GET";
        body = undefined;
        continue;
      }
      if (res.statusCode !== 200) throw new Error(`${url} answered ${res.statusCode}: ${text.slice(0, 300)}`);
      const form = parseForm(text);
      if (form === undefined) return undefined;
      url = new URL(form.action, url);
      method = "POST";
      body = form.fields.toString();
    }
    throw new Error("the browser went round in circles");
  } finally {
    await dispatcher.close();
  }
}
