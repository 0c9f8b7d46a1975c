// Loaded into every Node process an agent starts under `keybroker run` (NODE_OPTIONS=--import=…):
// sends fetch and the http/https modules through HTTPS_PROXY where the runtime does not do it
// itself. Node 22.21+ and 24 do, with NODE_USE_ENV_PROXY=1 (then this module does nothing);
// Node 20 does not, and its fetch and `https.request` would connect around the broker. Silent on
// success; undici comes from keybroker's own install, whatever the agent has installed.

import type * as Http from "node:http";
import https from "node:https";
import { createRequire } from "node:module";
import type { Duplex } from "node:stream";
import tls from "node:tls";
import type * as Undici from "undici";
import { http } from "../core/node-http.js";

const LEGACY_DISPATCHER = Symbol.for("undici.globalDispatcher.1");

function proxyFor(protocol: "http:" | "https:"): URL | undefined {
  const env = process.env;
  const value =
    protocol === "https:"
      ? (env.https_proxy ?? env.HTTPS_PROXY ?? env.all_proxy ?? env.ALL_PROXY)
      : (env.http_proxy ?? env.HTTP_PROXY ?? env.all_proxy ?? env.ALL_PROXY);
  if (value === undefined || value === "") return undefined;
  try {
    return new URL(value.includes("://") ? value : `http://${value}`);
  } catch {
    return undefined;
  }
}

/** NO_PROXY as curl reads it: `*`, host names and domain suffixes, optional ports. */
function bypassed(host: string, port: number): boolean {
  const list = (process.env.no_proxy ?? process.env.NO_PROXY ?? "").split(/[\s,]+/).filter(Boolean);
  const name = host.replace(/^\[|\]$/g, "").toLowerCase();
  return list.some((entry) => {
    if (entry === "*") return true;
    const m = /^(.*?)(?::(\d+))?$/.exec(entry.toLowerCase().replace(/^\[|\](?=:|$)/g, ""));
    const pattern = (m?.[1] ?? "").replace(/^\*?\./, "");
    if (m?.[2] !== undefined && Number(m[2]) !== port) return false;
    return name === pattern || name.endsWith(`.${pattern}`);
  });
}

function proxyAuthorization(proxy: URL): string | undefined {
  if (proxy.username === "" && proxy.password === "") return undefined;
  const user = decodeURIComponent(proxy.username);
  const pass = decodeURIComponent(proxy.password);
  return `Basic ${Buffer.from(`${user}:${pass}`).toString("base64")}`;
}

type Callback = (err: Error | null, stream: Duplex) => void;

/** An https.Agent that opens each connection as a CONNECT tunnel through the proxy. */
class TunnellingAgent extends https.Agent {
  override createConnection(options: Http.RequestOptions, callback?: Callback): Duplex | undefined {
    const tlsOptions = options as tls.ConnectionOptions;
    const host = options.host ?? "localhost";
    const port = Number(options.port) || 443;
    const proxy = proxyFor("https:");
    if (proxy === undefined || bypassed(host, port) || callback === undefined) return tls.connect(tlsOptions);
    const target = `${host.includes(":") ? `[${host}]` : host}:${port}`;
    const auth = proxyAuthorization(proxy);
    const req = http.request({
      host: proxy.hostname.replace(/^\[|\]$/g, ""),
      port: Number(proxy.port) || 80,
      method: "CONNECT",
      path: target,
      headers: { host: target, ...(auth === undefined ? {} : { "proxy-authorization": auth }) },
      agent: false,
    });
    req.once("connect", (res, socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        callback(new Error(`the proxy answered ${res.statusCode} to CONNECT ${target}`), socket);
        return;
      }
      callback(null, tls.connect({ ...tlsOptions, socket }));
    });
    req.once("error", (err) => callback(err, req.socket as Duplex));
    req.end();
    return undefined;
  }
}

/** An http.Agent that sends plain-HTTP requests to the proxy in absolute form. */
class ForwardingAgent extends http.Agent {
  addRequest(req: Http.ClientRequest, options: Http.RequestOptions & { host?: string }): void {
    const host = options.host ?? "localhost";
    const port = Number(options.port) || 80;
    const proxy = proxyFor("http:");
    if (proxy !== undefined && !bypassed(host, port)) {
      const hostPart = host.includes(":") ? `[${host}]` : host;
      req.path = `http://${hostPart}${port === 80 ? "" : `:${port}`}${req.path}`;
      const auth = proxyAuthorization(proxy);
      if (auth !== undefined) req.setHeader("proxy-authorization", auth);
      options = { ...options, host: proxy.hostname.replace(/^\[|\]$/g, ""), port: Number(proxy.port) || 80 };
    }
    // biome-ignore lint/suspicious/noExplicitAny: addRequest is public in practice but untyped.
    (http.Agent.prototype as any).addRequest.call(this, req, options);
  }
}

try {
  const dispatcher = (globalThis as Record<symbol, { constructor?: { name?: string } } | undefined>)[
    LEGACY_DISPATCHER
  ];
  if (proxyFor("https:") !== undefined && dispatcher?.constructor?.name !== "EnvHttpProxyAgent") {
    // The proxy agent and the request API it tunnels with (`connect`), which undici's index adds
    // to every dispatcher; not the index itself (fetch, WebSocket, caches: decision 26).
    const require = createRequire(import.meta.url);
    const EnvHttpProxyAgent =
      require("undici/lib/dispatcher/env-http-proxy-agent.js") as typeof Undici.EnvHttpProxyAgent;
    const { setGlobalDispatcher } = require("undici/lib/global.js") as typeof Undici;
    Object.assign(
      (require("undici/lib/dispatcher/dispatcher.js") as { prototype: object }).prototype,
      require("undici/lib/api/index.js"),
    );
    setGlobalDispatcher(new EnvHttpProxyAgent());
  }
  // Node 22.21+ and 24 give their global agents `proxyEnv` when NODE_USE_ENV_PROXY is set.
  const native = (agent: Http.Agent) => (agent as { options?: { proxyEnv?: unknown } }).options?.proxyEnv;
  if (native(https.globalAgent) === undefined) https.globalAgent = new TunnellingAgent({ keepAlive: true });
  if (native(http.globalAgent) === undefined) http.globalAgent = new ForwardingAgent({ keepAlive: true });
} catch (err) {
  process.stderr.write(
    `keybroker: this process could not be routed through the broker (${err instanceof Error ? err.message : String(err)}); its HTTPS may bypass keybroker\n`,
  );
}
