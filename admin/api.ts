// The broker's local admin API, for the CLI: status, what an agent gets (`env`/`run`), pool
// resets and one-time links to the admin page on the running broker.
// Requests carry the home's admin token (0600), compared in constant time.
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { join } from "node:path";
import { BrokerError, errorResponse } from "../core/errors.js";
import { ensurePrivateDir, writeFileAtomic } from "../core/fs.js";
import { VERSION } from "../core/version.js";
import { kindOf } from "../rules/kinds/index.js";
import { agentView } from "./agent-view.js";
import { handleApprovals } from "./approvals-api.js";
import { authorizeAdmin, isApprovalsRoute } from "./callers.js";
import type { AdminHost } from "./host.js";
import { handleLaunches } from "./launches-api.js";
import { providerStatuses, type StatusReport } from "./status.js";

export const ADMIN_PREFIX = "/__keybroker/admin/";

export function adminTokenPath(home: string): string {
  return join(home, "admin.token");
}

export function loadOrCreateAdminToken(home: string): string {
  ensurePrivateDir(home);
  const path = adminTokenPath(home);
  try {
    const token = readFileSync(path, "utf8").trim();
    if (token.length >= 32) return token;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  const token = randomBytes(32).toString("base64url");
  writeFileAtomic(path, token + "\n");
  return token;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

function fail(res: ServerResponse, err: BrokerError): void {
  const out = errorResponse(err);
  res.writeHead(out.status, out.headers);
  res.end(out.body);
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  let text = "";
  for await (const chunk of req) {
    text += String(chunk);
    if (text.length > 64 * 1024) throw new BrokerError("bad_request", "admin request body too large");
  }
  try {
    const value = JSON.parse(text || "{}") as unknown;
    if (typeof value === "object" && value !== null && !Array.isArray(value))
      return value as Record<string, unknown>;
  } catch {
    // fall through
  }
  throw new BrokerError("bad_request", "admin request body must be a JSON object");
}

export function statusReport(broker: AdminHost): StatusReport {
  const rejected = broker.reloadRejected;
  return {
    running: true,
    version: VERSION,
    url: broker.address.url,
    pid: process.pid,
    startedAt: broker.startedAt.toISOString(),
    uptimeSeconds: Math.floor((Date.now() - broker.startedAt.getTime()) / 1000),
    reload:
      rejected === undefined
        ? undefined
        : { rejectedAt: rejected.at.toISOString(), message: rejected.message },
    ca: { path: broker.ca.certPath, fingerprint: broker.ca.fingerprint256 },
    rules: broker.runtime.rules.origin,
    audit: broker.auditHealth(),
    state: broker.sharedState.health(),
    launches: broker.launches.list(),
    providers: providerStatuses(broker.runtime, broker.pools.snapshot(), (id) =>
      broker.logins.members(id).map((e) => e.login),
    ),
  };
}

export async function handleAdmin(
  broker: AdminHost,
  token: string,
  req: IncomingMessage,
  res: ServerResponse,
  page?: { loginLink(): string },
): Promise<void> {
  try {
    const route = (req.url ?? "").slice(ADMIN_PREFIX.length).split("?")[0] ?? "";
    const caller = authorizeAdmin(broker, token, req, route);
    if (isApprovalsRoute(route)) {
      send(res, 200, await handleApprovals(broker, caller, req, route, () => readJson(req)));
      return;
    }
    const action = (req.url ?? "").slice(ADMIN_PREFIX.length).split("?")[0];
    if (action === "status" && req.method === "GET") {
      send(res, 200, statusReport(broker));
      return;
    }
    if (action === "agent" && req.method === "GET") {
      const client = new URL(req.url ?? "", "http://admin").searchParams.get("client") ?? "default";
      const view = agentView(broker.runtime, client);
      if (view === undefined) {
        throw new BrokerError(
          "bad_request",
          `no such client "${client}" (known: ${[...broker.runtime.clients.keys()].join(", ")}) in the running broker's rules (${broker.runtime.rules.origin})`,
          { hint: "add it under clients:, or pick one with --client" },
        );
      }
      send(res, 200, view);
      return;
    }
    if (action === "launches" || action?.startsWith("launches/")) {
      send(res, 200, await handleLaunches(broker, req, action, () => readJson(req)));
      return;
    }
    if (action === "login-link" && req.method === "POST" && page !== undefined) {
      send(res, 200, { url: page.loginLink() });
      return;
    }
    if (action === "reset" && req.method === "POST") {
      const body = await readJson(req);
      const provider = body.provider;
      const credential = body.credential;
      if (typeof provider !== "string" || !broker.runtime.providers.has(provider)) {
        throw new BrokerError("bad_request", `unknown provider ${JSON.stringify(provider)}`, {
          hint: "see keybroker status",
        });
      }
      // An OAuth provider's credentials are its logins (the token store, as the broker holds it).
      const rule = broker.runtime.providers.get(provider)!.rule;
      const refs = kindOf(rule).poolOfLogins
        ? broker.logins.members(provider).map((e) => e.login.id)
        : rule.credentials;
      if (credential !== undefined && (typeof credential !== "string" || !refs.includes(credential))) {
        throw new BrokerError(
          "bad_request",
          `provider ${provider} has no credential ${JSON.stringify(credential)}`,
          {
            hint: `its credentials: ${refs.join(", ")}`,
          },
        );
      }
      const cleared = broker.pools.reset(provider, credential as string | undefined);
      broker.pools.flush();
      broker.onReset(provider, cleared);
      send(res, 200, { provider, cleared });
      return;
    }
    throw new BrokerError("bad_request", `unknown admin request ${req.method} ${req.url}`);
  } catch (err) {
    fail(res, err instanceof BrokerError ? err : new BrokerError("bad_request", "invalid admin request"));
  }
}
