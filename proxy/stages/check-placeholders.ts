// docs/spec.md §3.2: a placeholder bound for any host other than its provider's is never swapped; the
// request is refused before a byte leaves. Placeholders of another client are refused too.
import { BrokerError } from "../../core/errors.js";
import type { Exchange } from "../exchange.js";
import { canonicalizePath } from "./canonicalize-path.js";

export interface PlaceholderFinding {
  readonly placeholder: string;
  readonly where: string;
}

/** Every placeholder in the request line and headers, with where it was seen. */
export function findPlaceholders(x: Exchange): PlaceholderFinding[] {
  const index = x.rt.placeholders;
  const found: PlaceholderFinding[] = [];
  for (const p of index.find(x.path)) found.push({ placeholder: p, where: "url" });
  for (let i = 0; i < x.headers.length; i += 2) {
    for (const p of index.find(x.headers[i + 1]!))
      found.push({ placeholder: p, where: `header ${x.headers[i]}` });
    // Basic credentials hide the placeholder in base64.
    const value = x.headers[i + 1]!;
    if (
      (x.headers[i] === "authorization" || x.headers[i] === "proxy-authorization") &&
      /^basic /i.test(value)
    ) {
      const decoded = Buffer.from(value.slice(6).trim(), "base64").toString("utf8");
      for (const p of index.find(decoded))
        found.push({ placeholder: p, where: `basic credentials in ${x.headers[i]}` });
    }
  }
  return found;
}

export function checkPlaceholders(x: Exchange): void {
  checkFindings(x, findPlaceholders(x));
  if (x.sharedHost === undefined || x.provider === undefined) return;
  // Decisions 101 and 123: on a shared host the provider is known only now, so its path is put in the
  // canonical form here (canonicalizePath ran with no provider); placeholders that only the
  // canonical form spells out are checked like the others.
  const sent = x.path;
  canonicalizePath(x);
  if (x.path === sent) return;
  const before = new Set(x.rt.placeholders.find(sent));
  const revealed = x.rt.placeholders.find(x.path).filter((p) => !before.has(p));
  checkFindings(
    x,
    revealed.map((placeholder) => ({ placeholder, where: "url" })),
  );
}

function checkFindings(x: Exchange, findings: readonly PlaceholderFinding[]): void {
  const index = x.rt.placeholders;
  for (const { placeholder, where } of findings) {
    const owner = index.owner(placeholder)!;
    if (x.sharedHost !== undefined) pickSharedProvider(x, owner.provider);
    const providerId = x.provider?.rule.id;
    if (owner.provider !== providerId) {
      throw new BrokerError(
        "placeholder_host_mismatch",
        `a placeholder of provider "${owner.provider}" (in the ${where}) was bound for ${x.host}, which is not one of its hosts; the request was blocked and nothing was sent`,
        { provider: owner.provider, hint: `send ${owner.provider} requests only to its own hosts` },
      );
    }
    if (x.mode === "plain") {
      throw new BrokerError(
        "bad_request",
        `a ${owner.provider} placeholder was sent over plain HTTP to ${x.host}; credentials are only injected over HTTPS`,
        { provider: owner.provider, hint: `use https://${x.host}` },
      );
    }
    if (owner.client !== x.client.rule.name && !owner.shared) {
      throw new BrokerError(
        "client_unauthorized",
        `this placeholder belongs to client "${owner.client}", but the request came from client "${x.client.rule.name}"`,
        {
          provider: owner.provider,
          hint: `authenticate as "${owner.client}" or use your own placeholder (keybroker env)`,
        },
      );
    }
    x.placeholderSeenAt.push(where);
  }
}

/**
 * On a host several providers share, the first placeholder of one of them picks it; a
 * placeholder of another provider of the host as well is refused (decision 123).
 */
function pickSharedProvider(x: Exchange, owner: string): void {
  const candidate = x.sharedHost!.find((p) => p.rule.id === owner);
  if (candidate === undefined) return; // not a provider of this host: the mismatch below
  if (x.provider === undefined) {
    x.provider = candidate;
    return;
  }
  if (x.provider === candidate) return;
  const both = `"${x.provider.rule.id}" and "${owner}"`;
  throw new BrokerError(
    "bad_request",
    `the request to ${x.host} carries placeholders of two providers that share it, ${both}; keybroker cannot tell which credential to use, so nothing was sent`,
    { hint: `send one provider's placeholder per request (keybroker env prints each)` },
  );
}
