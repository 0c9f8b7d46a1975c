// Finds the client's placeholder at the provider's injection points, picks a credential and
// swaps the placeholder for it: a substring of a header value, a query parameter's value, or
// inside the decoded Basic credentials. Reverse mode sets the header itself (`inject.format`).
import { BrokerError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import { describeAttempts } from "../../secrets/resolver.js";
import type { Secret } from "../../secrets/secret.js";
import type { Exchange } from "../exchange.js";
import { setHeader } from "../headers.js";

/** Where the placeholder sits in this request; undefined when it is nowhere to inject. */
interface Sites {
  headers: number[];
  basic: number | undefined;
  query: boolean;
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

/** The first credential of the pool that resolves. */
export async function pickCredential(x: Exchange): Promise<Secret> {
  const provider = x.provider!;
  const reasons: string[] = [];
  for (const ref of provider.rule.credentials) {
    const cached = x.rt.resolver.peek(ref);
    if (cached !== undefined) return cached;
    const resolution = await x.rt.resolver.resolve(ref);
    if (resolution.secret !== undefined) return resolution.secret;
    reasons.push(`${ref} (${describeAttempts(resolution.attempts)})`);
  }
  const id = provider.rule.id;
  throw new BrokerError(
    "credential_unavailable",
    provider.rule.credentials.length === 0
      ? `provider "${id}" has no credentials configured`
      : `no credential of provider "${id}" has a value: ${reasons.join("; ")}`,
    {
      provider: id,
      hint: `set ${provider.rule.credentials[0] ?? `providers.${id}.credentials`} and run keybroker check`,
    },
  );
}

function assertClientMayUse(x: Exchange): void {
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

export function createInjectStage(log: Logger) {
  return async function inject(x: Exchange): Promise<void> {
    const provider = x.provider;
    if (provider === undefined || x.mode === "plain") return;
    const placeholder = x.rt.placeholders.get(x.client.rule.name, provider.rule.id);
    if (placeholder === undefined) return;
    x.placeholder = placeholder;
    const rule = provider.rule;

    if (x.mode === "reverse") {
      // The client sent a dummy key or nothing: keybroker sets the credential itself.
      assertClientMayUse(x);
      const secret = await pickCredential(x);
      x.secret = secret;
      const value = secret.reveal();
      for (const name of rule.inject.headers) {
        const format = rule.inject.format ?? (name === "authorization" ? "Bearer {secret}" : "{secret}");
        setHeader(x.headers, name, format.replaceAll("{secret}", value));
      }
      if (rule.inject.query !== undefined && queryValue(x.path, rule.inject.query) !== undefined) {
        x.path = rewriteQuery(x.path, rule.inject.query, () => value);
      }
      return;
    }

    const sites = findSites(x, placeholder);
    if (sites === undefined) {
      if (x.placeholderSeenAt.length > 0) {
        log.warn(
          { provider: rule.id, host: x.host, where: x.placeholderSeenAt },
          "placeholder outside the provider's injection points: left alone",
        );
      }
      return;
    }
    assertClientMayUse(x);
    const secret = await pickCredential(x);
    x.secret = secret;
    const value = secret.reveal();
    for (const i of sites.headers) x.headers[i] = x.headers[i]!.replaceAll(placeholder, value);
    if (sites.basic !== undefined) {
      const decoded = Buffer.from(x.headers[sites.basic]!.slice(6).trim(), "base64").toString("utf8");
      x.headers[sites.basic] =
        "Basic " + Buffer.from(decoded.replaceAll(placeholder, value)).toString("base64");
    }
    if (sites.query)
      x.path = rewriteQuery(x.path, rule.inject.query!, (old) => old.replaceAll(placeholder, value));
  };
}

export function applyHeaderRules(x: Exchange): void {
  const rule = x.provider?.rule;
  if (rule === undefined) return;
  for (const name of rule.headers.remove) {
    for (let i = x.headers.length - 2; i >= 0; i -= 2) if (x.headers[i] === name) x.headers.splice(i, 2);
  }
  for (const [name, value] of Object.entries(rule.headers.set)) setHeader(x.headers, name, value);
}
