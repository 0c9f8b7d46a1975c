// The admin page at /admin/ on the broker's listener (docs/spec.md §16): login (one-time link, password,
// admin token), sessions, and the views and actions of admin/views.ts. Server-rendered HTML that
// the page's script (admin/static/admin.js) fetches with the session's page secret in a header:
// the cookie alone gets only an empty frame (decision 104), since every local process can make
// the browser send it to a port of its own. Every answer carries a strict
// Content-Security-Policy; every change needs the session's CSRF token.
import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { isIP } from "node:net";
import { join } from "node:path";
import { packageRoot } from "../core/package-root.js";
import { isLoopbackHost } from "../rules/address.js";
import { kindOf } from "../rules/kinds/index.js";
import { parseDuration } from "../rules/units.js";
import { type AdminRole, IDLE_MS, type Session } from "../state/sessions/store.js";
import { statusReport } from "./api.js";
import { ChainChecker, recentAudit } from "./audit-view.js";
import { answeredBy, callerOfToken } from "./callers.js";
import { DeviceLogins } from "./device-logins.js";
import type { AdminHost } from "./host.js";
import type { Html } from "./html.js";
import {
  clientAddress,
  cookies,
  pageSecret,
  Refused,
  readForm,
  SECURITY_HEADERS,
  SESSION_HEADER,
} from "./page-http.js";
import { readPasswordHash, verifyPassword } from "./password.js";
import { COOKIE, LoginLimiter, type Sessions, sameToken } from "./sessions.js";
import type { Usage } from "./usage.js";
import {
  actionsFrame,
  actionsPart,
  approvalsPart,
  auditFrame,
  auditPart,
  type FormContext,
  loadingPage,
  loginPage,
  messagePage,
  overviewPart,
  pageShell,
  sessionPage,
  usagePart,
  VIEWS,
  type ViewName,
} from "./views.js";

export const PAGE_PREFIX = "/admin";

export function isAdminPagePath(url: string): boolean {
  return url === PAGE_PREFIX || url.startsWith(`${PAGE_PREFIX}/`) || url.startsWith(`${PAGE_PREFIX}?`);
}

const STATIC: Record<string, string> = {
  "admin.css": "text/css; charset=utf-8",
  "admin.js": "text/javascript; charset=utf-8",
  "icon.svg": "image/svg+xml",
};

export class AdminPage {
  readonly sessions: Sessions;
  readonly #host: AdminHost;
  readonly #adminToken: string;
  readonly #usage: Usage;
  readonly #limiter = new LoginLimiter();
  readonly #devices = new DeviceLogins();
  readonly #chains: ChainChecker;
  readonly #static = new Map<string, Buffer>();

  constructor(host: AdminHost, adminToken: string, usage: Usage, sessions: Sessions) {
    this.#host = host;
    this.#adminToken = adminToken;
    this.#usage = usage;
    this.sessions = sessions;
    this.#chains = new ChainChecker(host.home);
  }

  close(): void {
    this.#devices.close();
  }

  /** A one-time login link for `keybroker admin`, on the loopback address of the listener. */
  loginLink(): string {
    const { host, port } = this.#host.address;
    const shown = isLoopbackHost(host) ? (host.includes(":") ? `[${host}]` : host) : "127.0.0.1";
    return `http://${shown}:${port}/admin/login?code=${this.sessions.newLink()}`;
  }

  #cookieName(): string {
    return `${COOKIE}_${this.#host.address.port}`;
  }

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const secure = (req.socket as { encrypted?: boolean }).encrypted === true;
    try {
      this.#checkHost(req);
      const url = new URL(req.url ?? "/", "http://admin");
      const path = url.pathname;
      const method = req.method ?? "GET";
      // Off loopback, a password only travels over TLS: plain HTTP from elsewhere is sent there.
      if (!secure && !isLoopbackHost(clientAddress(req)) && !isLoopbackHost(this.#host.address.host)) {
        res.writeHead(308, { ...SECURITY_HEADERS, location: `https://${req.headers.host}${req.url}` });
        res.end();
        return;
      }
      if (path === PAGE_PREFIX) return this.#redirect(res, "/admin/");
      if (path.startsWith("/admin/static/") && method === "GET")
        return this.#serveStatic(res, path.slice(14));
      if (path === "/admin/login") {
        if (method === "POST") return await this.#login(req, res, secure);
        return await this.#loginForm(req, res, url.searchParams.get("code") ?? undefined, secure);
      }
      const view = (Object.keys(VIEWS) as ViewName[]).find((v) => VIEWS[v].path === path);
      const cookie = cookies(req).get(this.#cookieName());
      const secret = pageSecret(req);
      // The cookie alone (a browser sends it to every port of this host): an empty frame whose
      // script loads the view with the page secret, or the login page; never data, never a change.
      if (secret === undefined) {
        if (method === "POST") {
          throw new Refused(
            403,
            "Refused",
            "Changes are accepted only from the admin page's own script; nothing was done. Open the admin page and try again.",
          );
        }
        if (cookie === undefined || view === undefined) return this.#redirect(res, "/admin/login");
        return this.#send(res, 200, loadingPage(VIEWS[view].title));
      }
      // The live parts' polling is not use: an open tab alone does not keep a session alive.
      const poll = path.startsWith("/admin/part/");
      const session = await this.sessions.use(cookie, secret, !poll);
      if (session === undefined) {
        res.writeHead(401, { ...SECURITY_HEADERS, "content-type": "text/plain; charset=utf-8" });
        res.end("log in again");
        return;
      }
      if (!poll) this.#touchCookie(req, res, secure);
      if (method === "POST") return await this.#change(req, res, session, path, secure);
      if (method !== "GET" && method !== "HEAD")
        throw new Refused(405, "Not allowed", `${method} is not used here.`);
      if (view !== undefined) return await this.#view(res, session, view, url.searchParams);
      if (path.startsWith("/admin/part/")) {
        const part = path.slice("/admin/part/".length) as ViewName;
        if (part in VIEWS) return this.#send(res, 200, await this.#part(part, session, url.searchParams));
      }
      throw new Refused(404, "Not found", "There is no such page.");
    } catch (err) {
      if (err instanceof Refused) {
        this.#send(res, err.status, messagePage(err.title, err.message));
        return;
      }
      if (res.headersSent) {
        res.destroy();
        return;
      }
      this.#send(res, 500, messagePage("Something went wrong", (err as Error).message));
    }
  }

  /**
   * A name that could be rebound onto this machine (DNS rebinding) is refused; addresses,
   * localhost and the listener's own host are served.
   */
  #checkHost(req: IncomingMessage): void {
    const raw = req.headers.host ?? "";
    const name = raw
      .replace(/:\d+$/, "")
      .replace(/^\[(.*)\]$/, "$1")
      .toLowerCase();
    if (isIP(name) !== 0 || name === "localhost" || name === this.#host.address.host) return;
    throw new Refused(
      400,
      "Use the address",
      `The admin page answers on an IP address or localhost, not "${raw.slice(0, 100)}": open it by the machine's address.`,
    );
  }

  #redirect(res: ServerResponse, location: string): void {
    res.writeHead(303, { ...SECURITY_HEADERS, location });
    res.end();
  }

  #send(res: ServerResponse, status: number, page: Html): void {
    const body = Buffer.from(page.text);
    res.writeHead(status, {
      ...SECURITY_HEADERS,
      vary: SESSION_HEADER,
      "content-type": "text/html; charset=utf-8",
      "content-length": body.length,
    });
    res.end(body);
  }

  #serveStatic(res: ServerResponse, name: string): void {
    const type = STATIC[name];
    if (type === undefined) throw new Refused(404, "Not found", "There is no such file.");
    let body = this.#static.get(name);
    if (body === undefined) {
      body = readFileSync(join(packageRoot(), "admin", "static", name));
      this.#static.set(name, body);
    }
    res.writeHead(200, {
      ...SECURITY_HEADERS,
      "content-type": type,
      "content-length": body.length,
      "cache-control": "no-cache",
    });
    res.end(body);
  }

  #setCookie(res: ServerResponse, value: string, maxAgeSeconds: number, secure: boolean): void {
    res.setHeader(
      "set-cookie",
      `${this.#cookieName()}=${value}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}${secure ? "; Secure" : ""}`,
    );
  }

  /** The idle timeout slides on use: the same cookie value, its lifetime renewed (no rotation). */
  #touchCookie(req: IncomingMessage, res: ServerResponse, secure: boolean): void {
    const value = cookies(req).get(this.#cookieName());
    if (value !== undefined) this.#setCookie(res, value, IDLE_MS / 1000, secure);
  }

  /** Whether a password is set; an unreadable file counts as set (the form must still be shown). */
  async #hasPassword(): Promise<boolean> {
    return (await readPasswordHash(this.#host.home).catch(() => "unreadable")) !== undefined;
  }

  async #loginForm(
    req: IncomingMessage,
    res: ServerResponse,
    code: string | undefined,
    tls: boolean,
  ): Promise<void> {
    const hasPassword = await this.#hasPassword();
    const message =
      code !== undefined && !isLoopbackHost(clientAddress(req))
        ? "One-time links work only on this machine (loopback); log in with the password."
        : undefined;
    this.#send(
      res,
      200,
      loginPage({ message, code: message === undefined ? code : undefined, tls, hasPassword }),
    );
  }

  /** The role a token logs in as: the home's admin token, or an owner or admin client's. */
  #tokenLogin(secret: string): Login | undefined {
    const caller = callerOfToken(this.#host, this.#adminToken, secret);
    if (caller === undefined || (caller.role !== "owner" && caller.role !== "admin")) return undefined;
    const client = caller.by.startsWith("client ") ? caller.by.slice(7) : undefined;
    return { role: caller.role, via: caller.by, ...(client === undefined ? {} : { client }) };
  }

  /** Whether `secret` is the password: counted and bounded by the limiter first (decision 105). */
  async #passwordLogin(secret: string, address: string): Promise<Login | { refused: string } | undefined> {
    const ticket = this.#limiter.begin(address);
    if (!ticket.ok) {
      const refused =
        ticket.why === "locked"
          ? `Too many failed logins from ${address}: try again in ${Math.ceil(ticket.waitSeconds / 60)} min, or log in with the one-time link of keybroker admin or a token.`
          : ticket.why === "busy"
            ? `Another password from ${address} is being checked: try again in a moment.`
            : "Too many passwords are being checked at once: try again in a moment.";
      return { refused };
    }
    let ok = false;
    try {
      const hash = await readPasswordHash(this.#host.home).catch(() => undefined);
      ok = hash !== undefined && (await verifyPassword(secret, hash).catch(() => false));
    } finally {
      ticket.done(ok);
    }
    return ok ? { role: "owner", via: "password" } : undefined;
  }

  async #login(req: IncomingMessage, res: ServerResponse, secure: boolean): Promise<void> {
    const address = clientAddress(req);
    const hasPassword = await this.#hasPassword();
    const form = (message: string, status: number) =>
      this.#send(res, status, loginPage({ message, tls: secure, hasPassword }));
    let fields: URLSearchParams;
    try {
      this.#checkOrigin(req);
      fields = await readForm(req);
    } catch (err) {
      return form(err instanceof Refused ? err.message : "The login form could not be read.", 400);
    }
    // Links and tokens first: they are never locked out by failed passwords (decision 105).
    const code = fields.get("code");
    let who: Login | undefined;
    let failure = "wrong password or token";
    if (code !== null) {
      if (!isLoopbackHost(address)) failure = "one-time link used off loopback";
      else if (this.sessions.spendLink(code)) who = { role: "owner", via: "one-time link" };
      else failure = "one-time link unknown, used or expired";
    } else {
      const secret = fields.get("secret") ?? "";
      if (secret === "") failure = "empty password";
      else {
        const checked = this.#tokenLogin(secret) ?? (await this.#passwordLogin(secret, address));
        if (checked !== undefined && "refused" in checked) return form(checked.refused, 429);
        who = checked;
      }
    }
    if (who === undefined) {
      this.#host.audit({ decision: "admin_login_failed", reason: `from ${address}: ${failure}` });
      const again = failure.startsWith("one-time")
        ? `That ${failure.replace("one-time link", "one-time link is")}: run keybroker admin for a new one, or use the password.`
        : "That password or token is not right.";
      return form(again, 401);
    }
    const { cookie, secret } = await this.sessions.create(who.role, who.via);
    this.#host.audit({
      decision: "admin_login",
      ...(who.client === undefined ? {} : { client: who.client }),
      reason: `from ${address} by ${who.via} as ${who.role}`,
    });
    this.#setCookie(res, cookie, IDLE_MS / 1000, secure);
    // The page secret reaches the page's script here only; it keeps it in the origin's storage.
    this.#send(res, 200, sessionPage(secret, "/admin/"));
  }

  /** A change must come from this page: no other origin, no other site. */
  #checkOrigin(req: IncomingMessage): void {
    const site = req.headers["sec-fetch-site"];
    if (site === "cross-site" || site === "same-site") {
      throw new Refused(403, "Refused", "Changes are accepted only from the admin page itself.");
    }
    const origin = req.headers.origin;
    if (origin !== undefined && origin !== "null") {
      let host: string;
      try {
        host = new URL(origin).host;
      } catch {
        host = "";
      }
      if (host !== req.headers.host) {
        throw new Refused(403, "Refused", "Changes are accepted only from the admin page itself.");
      }
    } else if (origin === "null") {
      throw new Refused(403, "Refused", "Changes are accepted only from the admin page itself.");
    }
  }

  async #change(
    req: IncomingMessage,
    res: ServerResponse,
    session: Session,
    path: string,
    secure: boolean,
  ): Promise<void> {
    this.#checkOrigin(req);
    const fields = await readForm(req);
    const csrf = fields.get("csrf") ?? "";
    if (csrf === "" || !sameToken(csrf, session.csrf)) {
      throw new Refused(
        403,
        "Refused: no valid form token",
        "This change did not carry the page's form token (CSRF), so nothing was done. Reload the page and try again.",
      );
    }
    if (path === "/admin/logout") {
      await this.sessions.end(cookies(req).get(this.#cookieName()), pageSecret(req));
      this.#host.audit({ decision: "admin_logout", reason: `from ${clientAddress(req)} (${session.via})` });
      this.#setCookie(res, "", 0, secure);
      return this.#redirect(res, "/admin/login");
    }
    const back = (view: ViewName) => VIEWS[view].path;
    const done = async (kind: "ok" | "error", text: string, view: ViewName) => {
      session.flash = { kind, text };
      await this.sessions.save(session);
      this.#redirect(res, back(view));
    };
    const host = this.#host;
    const ownerOnly = () => {
      if (session.role !== "owner") throw new Refused(403, "Owners only", "Only an owner may do this.");
    };
    switch (path) {
      case "/admin/do/reset": {
        const target = fields.get("target");
        const [provider, credential] =
          target !== null
            ? splitTarget(target)
            : [fields.get("provider") ?? "", fields.get("credential") ?? ""];
        const view = fields.get("back") === "actions" ? "actions" : "overview";
        if (!host.runtime.providers.has(provider)) return done("error", `No provider "${provider}".`, view);
        const cleared = host.pools.reset(provider, credential || undefined);
        host.pools.flush();
        host.onReset(provider, cleared);
        return done(
          "ok",
          cleared.length === 0
            ? `${provider}: no marks to clear.`
            : `${provider}: cleared ${cleared.join(", ")}.`,
          view,
        );
      }
      case "/admin/do/device-login": {
        ownerOnly();
        const provider = fields.get("provider") ?? "";
        if (host.oauthClient(provider) === undefined)
          return done("error", `${provider} does not use OAuth.`, "actions");
        try {
          const state = await this.#devices.start(host, provider, fields.get("label") || "default");
          return state.status === "failed"
            ? done("error", `The login to ${provider} could not start: ${state.message}`, "actions")
            : done(
                "ok",
                `Login to ${provider} started: open the address below and enter the code.`,
                "actions",
              );
        } catch (err) {
          return done("error", (err as Error).message, "actions");
        }
      }
      case "/admin/do/remove-login": {
        ownerOnly();
        const [provider, id] = splitTarget(fields.get("target") ?? "");
        return done(...(await this.#removeLogin(provider, id)), "actions");
      }
      case "/admin/do/reload": {
        ownerOnly();
        await host.reloadRules().catch((err: Error) => {
          throw new Refused(409, "Reload not possible", err.message);
        });
        const rejected = host.reloadRejected;
        return rejected === undefined
          ? done("ok", "Rules reloaded.", "actions")
          : done("error", `Reload rejected, the previous rules stay: ${rejected.message}`, "actions");
      }
      case "/admin/do/approve":
      case "/admin/do/deny": {
        const approvals = host.approvals;
        const id = fields.get("id") ?? "";
        const by = answeredBy(host, `admin page (${session.via})`);
        if (path.endsWith("deny")) {
          return (await approvals.deny(id, by)) !== undefined
            ? done("ok", `Denied ${id}.`, "approvals")
            : done("error", `${id} is no longer pending.`, "approvals");
        }
        const forText = fields.get("for") ?? "";
        const forMs = forText === "" ? undefined : parseDuration(forText);
        return (await approvals.approve(id, by, forMs)) !== undefined
          ? done("ok", `Approved ${id}${forText ? ` and the same for ${forText}` : ""}.`, "approvals")
          : done("error", `${id} is no longer pending.`, "approvals");
      }
      default:
        throw new Refused(404, "Not found", "There is no such action.");
    }
  }

  async #removeLogin(provider: string, id: string): Promise<["ok" | "error", string]> {
    const host = this.#host;
    const rule = host.runtime.providers.get(provider)?.rule;
    const store = host.logins.store;
    const login =
      rule === undefined || !kindOf(rule).poolOfLogins ? undefined : await store.get(provider, id);
    if (login === undefined) return ["error", `There is no login ${provider}/${id}.`];
    let note = "";
    try {
      // An MCP login is revoked as the client it was made with, at its own server.
      const client = await host.loginClient(provider, id);
      if (client === undefined) note = " (not revoked: the server it was made with is not known)";
      else if (
        await client.revoke(
          login.refreshToken ?? login.accessToken,
          login.refreshToken ? "refresh_token" : "access_token",
        )
      ) {
        note = " and revoked it at the authorization server";
      }
    } catch (err) {
      note = ` (revoking it failed: ${(err as Error).message})`;
    }
    await store.remove(provider, id);
    if (kindOf(rule!).boundLogins) await host.sharedState.mcp.removeBinding(provider, id);
    return ["ok", `Removed the login ${provider}/${id}${note}.`];
  }

  async #view(res: ServerResponse, session: Session, view: ViewName, query: URLSearchParams): Promise<void> {
    const f: FormContext = { csrf: session.csrf, role: session.role };
    const flash = session.flash;
    if (flash !== undefined) {
      session.flash = undefined;
      await this.sessions.save(session);
    }
    const live = await this.#part(view, session, query);
    const report = statusReport(this.#host);
    let frame: Html | undefined;
    let q = "";
    if (view === "audit") {
      const filter = auditFilter(query);
      q = new URLSearchParams(Object.entries(filter).filter(([, v]) => v) as [string, string][]).toString();
      frame = auditFrame(
        filter,
        [...this.#host.runtime.clients.keys()],
        report.providers.map((p) => p.id),
      );
    }
    if (view === "actions") {
      const oauthProviders = [...this.#host.runtime.providers.values()]
        .filter((p) => p.rule.kind === "oauth_login" && p.rule.oauth.grant === "device")
        .map((p) => p.rule.id);
      frame = actionsFrame({ report, oauthProviders }, f);
    }
    const pending = (await this.#host.approvals.list()).length;
    this.#send(res, 200, pageShell(view, f, live, { flash, query: q, ...(frame ? { frame } : {}) }, pending));
  }

  async #part(view: ViewName, session: Session, query: URLSearchParams): Promise<Html> {
    const f: FormContext = { csrf: session.csrf, role: session.role };
    switch (view) {
      case "overview":
        return overviewPart(statusReport(this.#host), f);
      case "approvals":
        return approvalsPart(await this.#host.approvals.list(), f);
      case "audit": {
        const enabled = this.#host.runtime.rules.audit.enabled;
        return auditPart(
          await recentAudit(this.#host.home, auditFilter(query)),
          enabled ? await this.#chains.states() : undefined,
        );
      }
      case "usage":
        return usagePart(this.#usage.rows());
      case "actions":
        return actionsPart(this.#devices.list);
    }
  }
}

interface Login {
  role: AdminRole;
  via: string;
  client?: string;
}

function splitTarget(target: string): [string, string] {
  const slash = target.indexOf("/");
  return slash === -1 ? [target, ""] : [target.slice(0, slash), target.slice(slash + 1)];
}

function auditFilter(query: URLSearchParams): { provider?: string; client?: string; decision?: string } {
  const pick = (k: string) => {
    const v = query.get(k);
    return v === null || v === "" ? undefined : v.slice(0, 100);
  };
  return { provider: pick("provider"), client: pick("client"), decision: pick("decision") };
}
