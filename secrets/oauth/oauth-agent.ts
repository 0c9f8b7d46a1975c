// The upstream agent for OAuth requests made outside the broker (`auth add`, `auth remove`):
// the same `resolve`, `upstream_ca` and private-address rule as the broker's own agent.
import type { Agent } from "undici";
import { createUpstreamAgent } from "../../proxy/upstream.js";
import { hostMatches } from "../../rules/host-pattern.js";
import type { Rules } from "../../rules/types.js";

export function createOAuthAgent(rules: Rules): Agent {
  return createUpstreamAgent({
    upstreamCa: rules.upstreamCa,
    policy: {
      resolve: (host, port) => rules.resolve.get(`${host}:${port}`),
      allowsPrivate: (host, port) =>
        rules.providers.some(
          (p) => p.allowPrivateUpstream && p.hosts.some((h) => hostMatches(h, host, port)),
        ),
    },
  });
}
