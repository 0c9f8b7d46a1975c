// An MCP server behind keybroker (docs/spec.md §15). keybroker is its OAuth client, so the agent's MCP
// client sends no token (or any placeholder) and never sees the server's authorization:
//   - every request to the server gets the access token, through the mount or through the
//     proxy to the real URL alike: whatever Authorization the client sent is replaced;
//   - the authorization metadata (RFC 9728, RFC 8414, OpenID) is not served to the agent;
//   - an answer that challenges (401, or a WWW-Authenticate) never reaches the agent as such:
//     a refused token becomes keybroker's own 401 reauth_required with the command to run, so
//     the agent's client never starts a login of its own.
// Streams (SSE answers, the GET stream, DELETE, Mcp-Session-Id) pass through forward untouched.

import type { IncomingHttpHeaders } from "node:http";
import { BrokerError } from "../../core/errors.js";
import { kindOf } from "../../rules/kinds/index.js";
import type { Exchange } from "../exchange.js";
import type { HeldResponse } from "../forward.js";
import { assertClientMayUse } from "./inject.js";
import { labelFlag } from "./pick-credential.js";
import { NEXT, type Verdict } from "./stage.js";

const METADATA =
  /^\/\.well-known\/(oauth-protected-resource|oauth-authorization-server|openid-configuration)(\/|$|\?)/;

/** Plans the injection of every request to an MCP server (after planInjection). */
export function planMcp(x: Exchange): void {
  const rule = x.provider?.rule;
  if (rule === undefined || !kindOf(rule).wholeHost || x.mode === "plain") return;
  if (METADATA.test(x.path)) {
    throw new BrokerError(
      "policy_denied",
      `keybroker logs in to the MCP server of provider "${rule.id}" itself; its authorization metadata is not served to clients`,
      {
        provider: rule.id,
        hint: `run keybroker auth add ${rule.id} to log in; the MCP client needs no token`,
      },
    );
  }
  if (x.injection !== undefined) return;
  assertClientMayUse(x);
  x.placeholder ??= x.rt.placeholders.get(x.client.rule.name, rule.id);
  x.injection = { headers: [...x.headers], path: x.path, sites: undefined };
}

/**
 * Response-head stage: an MCP server's challenge never reaches the agent (docs/spec.md §15), even in an
 * answer too large to hold: the agent's MCP client must not start a login of its own.
 */
export function stripMcpChallenge(x: Exchange, headers: IncomingHttpHeaders): void {
  if (x.provider !== undefined && kindOf(x.provider.rule).wholeHost) delete headers["www-authenticate"];
}

/** Response stage: an MCP server's held answer becomes keybroker's (see mcpAnswer). */
export function answerMcp(x: Exchange): Verdict {
  const rule = x.provider?.rule;
  if (rule !== undefined && kindOf(rule).wholeHost) x.result!.held = mcpAnswer(x, x.result!.held!);
  return NEXT;
}

/**
 * What an MCP server's held answer becomes (once the refresh after a 401 has been tried): a 401 is keybroker's own `reauth_required`, never the server's
 * challenge; any other answer goes on without its WWW-Authenticate (an insufficient_scope 403).
 */
export function mcpAnswer(x: Exchange, held: HeldResponse): HeldResponse {
  const rule = x.provider?.rule;
  if (rule === undefined || !kindOf(rule).wholeHost) return held;
  if (held.status === 401) {
    const id = x.secret?.id;
    const login = id === undefined ? undefined : x.rt.logins?.get(rule.id, id)?.login;
    throw new BrokerError(
      "reauth_required",
      login?.state === "reauth_required"
        ? `the OAuth login ${rule.id}/${id} needs a new login (${login.reason ?? "refused"})`
        : `the MCP server of provider "${rule.id}" refused keybroker's access token${id === undefined ? "" : ` of login ${id}`}, and refreshing it did not help`,
      { provider: rule.id, hint: `keybroker auth add ${rule.id}${labelFlag(id)}` },
    );
  }
  if (held.headers["www-authenticate"] === undefined) return held;
  const { "www-authenticate": _challenge, ...headers } = held.headers;
  return { ...held, headers };
}
