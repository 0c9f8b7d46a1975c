// Finds the client's placeholder at the provider's injection points, picks a credential and
// swaps the placeholder for it: a substring of a header value, a query parameter's value, or
// inside the decoded Basic credentials. Reverse mode sets the header itself (`inject.format`).
import { BrokerError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import type { Secret } from "../../secrets/secret.js";
import type { Exchange, Sites } from "../exchange.js";
import { replaceHeaders, setHeader } from "../headers.js";

/**
 * `text` with every `find` replaced by `value`, as one flat string: replaceAll's result is a
 * chain of pieces, and each regular-expression check of the header on its way upstream
 * (proxy/upstream-h1-wire.ts) would have V8 flatten it through its runtime first. No pattern
 * either: a `$` in the secret is only a `$`.
 */
export function substitute(text: string, find: string, value: string): string {
  let at = text.indexOf(find);
  if (at === -1) return text;
  const parts: string[] = [];
  let from = 0;
  while (at !== -1) {
    parts.push(text.slice(from, at), value);
    from = at + find.length;
    at = text.indexOf(find, from);
  }
  parts.push(text.slice(from));
  return parts.join("");
}

function findSites(x: Exchange, placeholder: string): Sites | undefined {
  const inject = x.provider!.rule.inject;
  const sites: Sites = { headers: [], basic: undefined, query: false };
  for (let i = 0; i < x.headers.length; i += 2) {
    const name = x.headers[i]!;
    const value = x.headers[i + 1]!;
    if (inject.headers.includes(name) && value.includes(placeholder)) sites.headers.push(i + 1);
    else if (inject.basic !== undefined && name === "authorization" && /^basic /i.test(value)) {
      if (Buffer.from(value.slice(6).trim(), "base64").toString("utf8").includes(placeholder))
        sites.basic = i + 1;
    }
  }
  if (inject.query !== undefined)
    sites.query = queryValue(x.path, inject.query)?.includes(placeholder) ?? false;
  return sites.headers.length > 0 || sites.basic !== undefined || sites.query ? sites : undefined;
}

function queryValue(path: string, name: string): string | undefined {
  const q = path.indexOf("?");
  if (q === -1) return undefined;
  for (const pair of path.slice(q + 1).split("&")) {
    const eq = pair.indexOf("=");
    const key = eq === -1 ? pair : pair.slice(0, eq);
    if (safeDecode(key) === name) return eq === -1 ? "" : safeDecode(pair.slice(eq + 1));
  }
  return undefined;
}

function rewriteQuery(path: string, name: string, rewrite: (old: string) => string): string {
  const q = path.indexOf("?");
  const pairs = path
    .slice(q + 1)
    .split("&")
    .map((pair) => {
      const eq = pair.indexOf("=");
      if (eq === -1 || safeDecode(pair.slice(0, eq)) !== name) return pair;
      return `${pair.slice(0, eq)}=${encodeURIComponent(rewrite(safeDecode(pair.slice(eq + 1))))}`;
    });
  return `${path.slice(0, q)}?${pairs.join("&")}`;
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s.replace(/\+/g, " "));
  } catch {
    return s;
  }
}

export function assertClientMayUse(x: Exchange): void {
  const id = x.provider!.rule.id;
  if (!x.rt.clientAllows(x.client, id)) {
    throw new BrokerError(
      "client_unauthorized",
      `client "${x.client.rule.name}" may not use provider "${id}"`,
      {
        provider: id,
        hint: `add ${id} to clients.${x.client.rule.name}.providers`,
      },
    );
  }
}

/**
 * Writes `secret` into the request: the placeholder at the found sites (intercept), or the
 * provider's header(s) built with `inject.format` (reverse). Starts from the request as the
 * client sent it, so a retry on another credential leaves no trace of the first.
 */
export function applyCredential(x: Exchange, secret: Secret): void {
  const plan = x.injection!;
  const rule = x.provider!.rule;
  // `substitute` reads no pattern: a `$` in a secret is not taken for a `$&`.
  const value = secret.reveal();
  replaceHeaders(x.headers, plan.headers);
  x.path = plan.path;
  x.secret = secret;
  if (plan.sites === undefined) {
    for (const name of rule.inject.headers) {
      const format = rule.inject.format ?? (name === "authorization" ? "Bearer {secret}" : "{secret}");
      setHeader(
        x.headers,
        name,
        format.replaceAll("{secret}", () => value),
      );
    }
    if (rule.inject.query !== undefined && queryValue(x.path, rule.inject.query) !== undefined) {
      x.path = rewriteQuery(x.path, rule.inject.query, () => value);
    }
    return;
  }
  const placeholder = x.placeholder!;
  for (const i of plan.sites.headers) x.headers[i] = substitute(x.headers[i]!, placeholder, value);
  if (plan.sites.basic !== undefined) {
    const decoded = Buffer.from(x.headers[plan.sites.basic]!.slice(6).trim(), "base64").toString("utf8");
    x.headers[plan.sites.basic] =
      "Basic " + Buffer.from(decoded.replaceAll(placeholder, () => value)).toString("base64");
  }
  if (plan.sites.query)
    x.path = rewriteQuery(x.path, rule.inject.query!, (old) => old.replaceAll(placeholder, () => value));
}

/**
 * Decides whether this request gets a credential: in reverse mode always, when intercepted only
 * if the client's placeholder sits at one of the provider's injection points.
 */
export function createPlanInjection(log: Logger) {
  return function planInjection(x: Exchange): void {
    const provider = x.provider;
    if (provider === undefined || x.mode === "plain") return;
    const placeholder = x.phantom?.token ?? x.rt.placeholders.get(x.client.rule.name, provider.rule.id);
    if (placeholder === undefined) return;
    x.placeholder = placeholder;
    if (x.mode === "reverse") {
      assertClientMayUse(x);
      x.injection = { headers: [...x.headers], path: x.path, sites: undefined };
      return;
    }
    const sites = findSites(x, placeholder);
    if (sites === undefined) {
      if (x.placeholderSeenAt.length > 0) {
        log.warn(
          { provider: provider.rule.id, host: x.host, where: x.placeholderSeenAt },
          "placeholder outside the provider's injection points: left alone",
        );
      }
      return;
    }
    assertClientMayUse(x);
    x.injection = { headers: [...x.headers], path: x.path, sites };
  };
}

export function applyHeaderRules(x: Exchange): void {
  const rule = x.provider?.rule;
  if (rule === undefined) return;
  // A response to a request with a credential is scrubbed of it: ask for it uncompressed.
  if (x.injection !== undefined) setHeader(x.headers, "accept-encoding", "identity");
  for (const name of rule.headers.remove) {
    for (let i = x.headers.length - 2; i >= 0; i -= 2) if (x.headers[i] === name) x.headers.splice(i, 2);
  }
  for (const [name, value] of Object.entries(rule.headers.set)) setHeader(x.headers, name, value);
}
