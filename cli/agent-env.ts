// The variables an agent runs with: proxy, CA bundle, and a placeholder per active provider.

import type { Rules } from "../rules/types.js";
import { parseRef } from "../secrets/resolver.js";

export interface AgentEnvInput {
  /** Broker URL, e.g. http://127.0.0.1:8899 */
  readonly url: string;
  readonly client: string;
  /** The client's token, when it has one. */
  readonly token: string | undefined;
  readonly bundle: string;
  /** Variable name → placeholder. */
  readonly placeholders: Readonly<Record<string, string>>;
}

export function proxyUrl(url: string, client: string, token: string | undefined): string {
  if (client === "default" && token === undefined) return url;
  const u = new URL(url);
  u.username = encodeURIComponent(client);
  if (token !== undefined) u.password = encodeURIComponent(token);
  return u.toString().replace(/\/$/, "");
}

export function agentVariables(input: AgentEnvInput): Record<string, string> {
  const proxy = proxyUrl(input.url, input.client, input.token);
  return {
    HTTPS_PROXY: proxy,
    HTTP_PROXY: proxy,
    ALL_PROXY: proxy,
    https_proxy: proxy,
    http_proxy: proxy,
    all_proxy: proxy,
    NO_PROXY: "localhost,127.0.0.1,::1",
    no_proxy: "localhost,127.0.0.1,::1",
    SSL_CERT_FILE: input.bundle,
    REQUESTS_CA_BUNDLE: input.bundle,
    CURL_CA_BUNDLE: input.bundle,
    NODE_EXTRA_CA_CERTS: input.bundle,
    GIT_SSL_CAINFO: input.bundle,
    DENO_CERT: input.bundle,
    NODE_USE_ENV_PROXY: "1",
    ...input.placeholders,
  };
}

/**
 * Every environment variable that holds (or may hold) a real secret under these rules:
 * credentials named bare or with `env:`, client tokens, and the Infisical machine identity.
 * `run` removes them from the child's environment.
 */
export function secretVariableNames(rules: Rules): Set<string> {
  const names = new Set<string>();
  const add = (ref: string | undefined) => {
    if (ref === undefined) return;
    const parsed = parseRef(ref);
    if (parsed.source === undefined || parsed.source === "env") names.add(parsed.key);
  };
  for (const provider of rules.providers) {
    provider.credentials.forEach(add);
    if (provider.auth?.kind === "aws_sigv4") {
      add(provider.auth.accessKeyId);
      add(provider.auth.secretAccessKey);
      add(provider.auth.sessionToken);
    }
    if (provider.auth?.kind === "google_service_account") add(provider.auth.key);
  }
  for (const client of rules.clients) add(client.token);
  add(rules.sources.infisical?.clientId);
  add(rules.sources.infisical?.clientSecret);
  return names;
}
