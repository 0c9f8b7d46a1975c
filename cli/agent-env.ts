// The variables an agent runs with: proxy, CA bundle, and a placeholder per active provider.

import { pathToFileURL } from "node:url";
import { bundleDirFor } from "../certs/bundle.js";

export interface AgentEnvInput {
  /** Broker URL, e.g. http://127.0.0.1:8899 */
  readonly url: string;
  readonly client: string;
  /** The client's token, when it has one. */
  readonly token: string | undefined;
  readonly bundle: string;
  /** Variable name → placeholder. */
  readonly placeholders: Readonly<Record<string, string>>;
  /** The Node preload (dist/cli/node-preload.js) to load into the agent's Node processes. */
  readonly nodePreload?: string | undefined;
  /** The NODE_OPTIONS the agent would have had: kept, with the preload added after them. */
  readonly nodeOptions?: string | undefined;
}

/**
 * NODE_OPTIONS with the preload added (once, however often `run` nests). The warning code is
 * Node 22's "EnvHttpProxyAgent is experimental", printed by every process with NODE_USE_ENV_PROXY.
 */
export function nodeOptionsWith(current: string | undefined, preload: string): string {
  const own = [`--import=${pathToFileURL(preload).href}`, "--disable-warning=UNDICI-EHPA"];
  const parts = (current ?? "").trim() === "" ? [] : [(current ?? "").trim()];
  for (const option of own) if (!parts.some((p) => p.split(/\s+/).includes(option))) parts.push(option);
  return parts.join(" ");
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
    AWS_CA_BUNDLE: input.bundle,
    PIP_CERT: input.bundle,
    HTTPLIB2_CA_CERTS: input.bundle,
    // gRPC's C core (Python grpcio, Ruby, PHP), Nix-built programs, gcloud.
    GRPC_DEFAULT_SSL_ROOTS_FILE_PATH: input.bundle,
    NIX_SSL_CERT_FILE: input.bundle,
    CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE: input.bundle,
    SSL_CERT_DIR: bundleDirFor(input.bundle),
    NODE_USE_ENV_PROXY: "1",
    ...(input.nodePreload === undefined
      ? {}
      : { NODE_OPTIONS: nodeOptionsWith(input.nodeOptions, input.nodePreload) }),
    ...input.placeholders,
  };
}
