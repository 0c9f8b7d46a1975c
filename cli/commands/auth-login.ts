// `keybroker auth add|remove|list` for OAuth providers (docs/spec.md §8): makes a login with the
// device grant or a code with PKCE, stores it only once complete, and deletes (revoking) one.
import { spawn } from "node:child_process";
import type { Agent } from "undici";
import { AuditTrail } from "../../audit/audit-trail.js";
import { UserError } from "../../core/errors.js";
import { knownSecrets } from "../../core/scrub.js";
import { createOAuthAgent } from "../../proxy/oauth-agent.js";
import { DEFAULT_PORT, hostMatches } from "../../rules/host-pattern.js";
import { kindOf } from "../../rules/kinds/index.js";
import type { OAuthRule, Rules } from "../../rules/types.js";
import { parseDuration } from "../../rules/units.js";
import { deviceLogin } from "../../secrets/oauth/device-login.js";
import { bindingSecret, mcpClient, mcpLogin } from "../../secrets/oauth/mcp-login.js";
import { OAuthClient, type Tokens } from "../../secrets/oauth/oauth-client.js";
import { pkceLogin } from "../../secrets/oauth/pkce-login.js";
import { printable } from "../../secrets/oauth/verification-url.js";
import { PoolState } from "../../secrets/pool.js";
import { fingerprintOf } from "../../secrets/secret.js";
import type { McpBinding, McpStore } from "../../state/mcp/store.js";
import { checkLabel, DEFAULT_LABEL, describeLogin, newLogin } from "../../state/tokens/login.js";
import type { TokenStore } from "../../state/tokens/store.js";
import { UsageError } from "../args.js";
import type { Context } from "../context.js";
import { findRunningBroker, localResolver } from "../context.js";
import { openTokenStore } from "../token-store.js";

export interface AddOptions {
  readonly label?: string | undefined;
  readonly flow?: string | undefined;
  readonly port?: string | undefined;
  readonly noBrowser?: boolean | undefined;
  readonly timeout?: string | undefined;
}

function oauthClient(
  ctx: Context,
  rules: Rules,
  rule: OAuthRule,
  bound?: { binding: McpBinding; store: McpStore },
): { client: OAuthClient; close: () => void; secret: () => Promise<string | undefined>; agent: Agent } {
  const spec = rule.oauth;
  const agent = createOAuthAgent(rules);
  const resolver = localResolver(ctx, rules);
  const secret = async () =>
    spec.clientSecret === undefined
      ? undefined
      : (await resolver.resolve(spec.clientSecret)).secret?.reveal();
  const client =
    bound === undefined
      ? new OAuthClient(rule.id, spec, agent, secret)
      : mcpClient(rule, bound.binding, agent, bindingSecret(bound.binding, bound.store, secret));
  return { client, close: () => void agent.close().catch(() => {}), secret, agent };
}

/** Opens a URL with the platform's opener, where there is one; the URL is printed anyway. */
export function openBrowser(url: string): void {
  const opener =
    process.platform === "darwin"
      ? ["open"]
      : process.platform === "win32"
        ? ["cmd", "/c", "start", ""]
        : ["xdg-open"];
  try {
    const child = spawn(opener[0]!, [...opener.slice(1), url], { stdio: "ignore", detached: true });
    child.on("error", () => {});
    child.unref();
  } catch {
    // No opener: the printed URL is enough.
  }
}

/**
 * Audits a login added or removed while no broker runs (a running broker sees the change in
 * the token store and writes the line itself, so the chain keeps one writer).
 */
async function auditWithoutBroker(
  ctx: Context,
  rules: Rules,
  entry: { decision: "login" | "removed"; provider: string; credential: string; token: string },
): Promise<void> {
  if (!rules.audit.enabled || (await findRunningBroker(ctx.home)) !== undefined) return;
  knownSecrets.add(entry.token);
  const trail = new AuditTrail(ctx.home, {
    maxBytes: rules.audit.maxBytes,
    keep: rules.audit.keep,
    scrubber: knownSecrets,
    onError: (err) => ctx.err(`warning: the audit log cannot be written: ${err.message}`),
  });
  trail.record({
    decision: entry.decision,
    provider: entry.provider,
    credential: entry.credential,
    fingerprint: fingerprintOf(entry.token),
  });
  await trail.close();
}

export async function addLogin(
  ctx: Context,
  rules: Rules,
  rule: OAuthRule,
  opts: AddOptions,
): Promise<number> {
  const spec = rule.oauth;
  const label = checkLabel(opts.label ?? DEFAULT_LABEL);
  const flow = opts.flow ?? spec.grant;
  if (flow !== "device" && flow !== "pkce") {
    if (flow === "client_credentials") {
      throw new UserError(
        `${rule.id} uses grant client_credentials: it needs no login; the broker fetches its token from client_id and client_secret`,
      );
    }
    throw new UsageError(`--flow: expected device or pkce, got "${flow}"`);
  }
  if (kindOf(rule).boundLogins && flow !== "pkce") {
    throw new UsageError(`${rule.id} is an MCP server: it logs in with --flow pkce only`);
  }
  const port = opts.port === undefined ? undefined : Number(opts.port);
  if (port !== undefined && !(Number.isInteger(port) && port > 0 && port < 65536)) {
    throw new UsageError(`--port: expected a port number, got "${opts.port}"`);
  }
  const waitMs = opts.timeout === undefined ? undefined : parseDuration(opts.timeout);
  if (opts.timeout !== undefined && (waitMs === undefined || waitMs <= 0)) {
    throw new UsageError(`--timeout: expected a duration such as 10m, got "${opts.timeout}"`);
  }
  // The home's stores, or the fleet's Redis: an MCP login reads and writes its registration
  // and binding there before the login itself is stored.
  const state = await openTokenStore(ctx, rules);
  const { client, close, secret, agent } = oauthClient(ctx, rules, rule);
  try {
    const pkce = {
      ...(port === undefined ? {} : { port }),
      ...(waitMs === undefined ? {} : { waitMs }),
      print: ctx.out,
      ...(opts.noBrowser ? {} : { openBrowser }),
    };
    let tokens: Tokens;
    if (rule.kind === "mcp") {
      // docs/spec.md §15: discovered at the server; the binding is stored before the login it belongs to.
      const made = await mcpLogin(rule, {
        ...pkce,
        id: label,
        dispatcher: agent,
        store: state.mcp,
        configuredSecret: secret,
      });
      await state.mcp.putBinding(made.binding);
      tokens = made.tokens;
    } else {
      tokens = flow === "device" ? await deviceLogin(client, ctx.out) : await pkceLogin(client, pkce);
    }
    const login = newLogin(rule.id, label, tokens);
    await state.store.put(login);
    // A running broker sees the new login and clears the old one's marks itself.
    if ((await findRunningBroker(ctx.home)) === undefined) {
      const pools = new PoolState(ctx.home, (m) => ctx.err(`warning: ${m}`));
      pools.reset(rule.id, label);
      pools.flush();
    }
    await auditWithoutBroker(ctx, rules, {
      decision: "login",
      provider: rule.id,
      credential: label,
      token: login.accessToken,
    });
    const s = describeLogin(login);
    ctx.out(
      `${rule.id}: logged in as credential "${label}"${s.expiresAt === undefined ? "" : `, access token valid until ${s.expiresAt}`}${s.refreshable ? "" : " (no refresh token: log in again when it expires)"}`,
    );
    if (login.apiBase !== undefined) sayApiBase(ctx, rule, login.apiBase);
    return 0;
  } catch (err) {
    if (err instanceof UserError || err instanceof UsageError) throw err;
    throw new UserError(`the login to ${rule.id} failed: ${(err as Error).message}; nothing was stored`);
  } finally {
    close();
    await state.close();
  }
}

/**
 * The API the server named for the login (Qwen's `resource_url` is a bare host name, Nous
 * Portal's `inference_base_url` a URL; decision 174): said, and a warning when it is not on one
 * of the provider's hosts, where keybroker would never put the token.
 */
function sayApiBase(ctx: Context, rule: OAuthRule, base: string): void {
  let url: URL | undefined;
  try {
    url = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(base) ? base : `https://${base}`);
  } catch {
    url = undefined;
  }
  const port = url?.port === "" ? DEFAULT_PORT : Number(url?.port);
  if (url?.protocol === "https:" && rule.hosts.some((h) => hostMatches(h, url.hostname, port))) {
    ctx.out(`${rule.id}: the server serves this login at ${url.origin}`);
    return;
  }
  ctx.err(
    `warning: ${rule.id}: the server serves this login at ${printable(url?.origin ?? base.slice(0, 200))}, which is not one of the provider's hosts, and keybroker sends its token nowhere else: list that host in providers.${rule.id}.hosts of a rule file to use it`,
  );
}

export async function removeLogin(
  ctx: Context,
  rules: Rules,
  rule: OAuthRule,
  credential: string | undefined,
): Promise<number> {
  if (credential === undefined) {
    throw new UsageError(`keybroker auth remove ${rule.id} needs --credential ID (see keybroker auth list)`);
  }
  const tokens = await openTokenStore(ctx, rules);
  try {
    return await removeFrom(tokens, ctx, rules, rule, credential);
  } finally {
    await tokens.close();
  }
}

async function removeFrom(
  { store, mcp }: { store: TokenStore; mcp: McpStore },
  ctx: Context,
  rules: Rules,
  rule: OAuthRule,
  credential: string,
): Promise<number> {
  const login = await store.get(rule.id, credential);
  if (login === undefined) {
    const ids = (await store.list(rule.id)).map((l) => l.id);
    throw new UserError(
      `provider "${rule.id}" has no login "${credential}"; its logins: ${ids.length === 0 ? "none" : ids.join(", ")}`,
    );
  }
  let revoked = false;
  let warning: string | undefined;
  // An MCP login is revoked as the client it was made with, at its server.
  const binding = kindOf(rule).boundLogins ? await mcp.binding(rule.id, credential) : undefined;
  const { client, close } = oauthClient(ctx, rules, rule, binding && { binding, store: mcp });
  try {
    revoked = await client.revoke(
      login.refreshToken ?? login.accessToken,
      login.refreshToken ? "refresh_token" : "access_token",
    );
  } catch (err) {
    warning = (err as Error).message;
  } finally {
    close();
  }
  await store.remove(rule.id, credential);
  await auditWithoutBroker(ctx, rules, {
    decision: "removed",
    provider: rule.id,
    credential,
    token: login.accessToken,
  });
  if (kindOf(rule).boundLogins) await mcp.removeBinding(rule.id, credential);
  ctx.out(
    `${rule.id}: removed login "${credential}"${revoked ? " and revoked it at the authorization server" : ""}`,
  );
  if (warning !== undefined)
    ctx.err(`warning: the login was deleted here but revoking it failed: ${warning}`);
  return 0;
}
