// The upstream agent for OAuth requests made outside the broker (`auth add`, `auth remove`):
// the same `resolve`, `upstream_ca` and private-address rule as the broker's own agent.
import type { Agent } from "undici";
import { isLoopbackHost } from "../rules/address.js";
import { hostMatches } from "../rules/host-pattern.js";
import { isOAuthRule } from "../rules/kinds/index.js";
import type { ProviderRule, Rules } from "../rules/types.js";
import { createUpstreamAgent } from "./upstream.js";

export function createOAuthAgent(rules: Rules): Agent {
  return createUpstreamAgent({
    upstreamCa: rules.upstreamCa,
    policy: {
      resolve: (host, port) => rules.resolve.get(`${host}:${port}`),
      allowsPrivate: (host, port) => allowsPrivate(rules, host, port),
    },
  });
}

/**
 * `allow_private_upstream`: a provider's own hosts may be private addresses, and so may the
 * endpoints its `oauth:` block names (decision 124); so may the authorization server of an MCP
 * server on loopback, when that is on loopback too (a local setup, such as the MCP conformance
 * suite's, where the port is only known at login).
 */
export function allowsPrivate(rules: Rules, host: string, port: number): boolean {
  return rules.providers.some(
    (p) =>
      p.allowPrivateUpstream &&
      (p.hosts.some((h) => hostMatches(h, host, port)) ||
        oauthTargets(p).has(`${host.replace(/^\[|\]$/g, "").toLowerCase()}:${port}`) ||
        (p.kind === "mcp" &&
          isLoopbackHost(host.replace(/^\[|\]$/g, "")) &&
          isLoopbackHost(new URL(p.mcp.url).hostname.replace(/^\[|\]$/g, "")))),
  );
}

const targets = new WeakMap<ProviderRule, ReadonlySet<string>>();

/** `host:port` of each endpoint a provider's `oauth:` block names (issuer included). */
function oauthTargets(p: ProviderRule): ReadonlySet<string> {
  let found = targets.get(p);
  if (found === undefined) {
    const o = isOAuthRule(p) ? p.oauth : undefined;
    const urls = [o?.issuer, o?.deviceAuthorizationEndpoint, o?.tokenEndpoint, o?.revocationEndpoint];
    found = new Set(
      urls.flatMap((u) => {
        if (u === undefined) return [];
        const url = new URL(u);
        const host = url.hostname.replace(/^\[|\]$/g, "").toLowerCase();
        return [`${host}:${url.port || (url.protocol === "http:" ? 80 : 443)}`];
      }),
    );
    targets.set(p, found);
  }
  return found;
}
