// Starting and stopping keybroker the way bench/peer-extra.sh does: a rule file in a temp
// folder, then `node dist/cli/main.js start --home H --config F --port 0`, the port taken from
// the line `keybroker listening on http://127.0.0.1:PORT · CA H/ca/ca.pem`.
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { BENCH_DOMAIN, makeUpstreamCerts } from "./certs.mjs";
import { startChild, stopChild } from "./procs.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const BROKER_MAIN = path.join(ROOT, "dist/cli/main.js");

/** What the client sends and the upstream expects. Two providers, so two placeholders. */
export const REAL_KEY = "sk-bench-real-key-0123456789";
export const PLACEHOLDER = "PLACEHOLDER-BENCH-LOCAL";
export const WILD_PLACEHOLDER = "PLACEHOLDER-BENCH-WILD";

const indent = (text, n) =>
  text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => `${" ".repeat(n)}${l}`)
    .join("\n");

/**
 * The rule file. Provider `bench` is bound to localhost:<upstream port>, exactly as in
 * peer-extra.sh. Provider `wild` is bound to `*.bench.test` (port 443), and `resolve` sends each
 * of `wildHosts` to the upstream, for the new-host scenario. The variant's snippets go at the
 * top level and into both providers.
 */
export function ruleFile({ upstreamPort, upstreamCa, wildHosts, variant }) {
  const q = JSON.stringify; // a JSON string is a valid YAML scalar
  const provider = (hosts, placeholder) =>
    [
      `    hosts: [${hosts.map(q).join(", ")}]`,
      "    inject: { header: authorization }",
      // The oauth variant: the same key, as the access token of a stored login (never refreshed
      // during the run: it expires in a year, and the token endpoint is never asked).
      variant.oauth
        ? `    oauth: { device_authorization_endpoint: "https://auth.${BENCH_DOMAIN}/device", token_endpoint: "https://auth.${BENCH_DOMAIN}/token", client_id: bench }`
        : '    credentials: ["env:BENCH_REAL_KEY"]',
      `    placeholder: { value: ${q(placeholder)} }`,
      "    allow_private_upstream: true",
      indent(variant.provider ?? "", 4),
    ]
      .filter(Boolean)
      .join("\n");
  const resolve = wildHosts.map((h) => `  ${q(`${h}:443`)}: ${q(`127.0.0.1:${upstreamPort}`)}`);
  return [
    "version: 1",
    `upstream_ca: [${q(upstreamCa)}]`,
    "catalogue: false",
    ...(resolve.length ? ["resolve:", ...resolve] : []),
    "providers:",
    "  bench:",
    provider([`localhost:${upstreamPort}`], PLACEHOLDER),
    "  wild:",
    provider([`*.${BENCH_DOMAIN}`], WILD_PLACEHOLDER),
    indent(variant.top ?? "", 0),
    "",
  ]
    .filter((l) => l !== "")
    .join("\n");
}

/**
 * Starts the fake upstream (bench/upstream.mjs) in its own process, with certificates made in
 * `dir`; `h2` has it offer HTTP/2 beside HTTP/1.1. Resolves `{child, upstream: {port, ca, caPem, pid}}`.
 */
export async function startUpstream(dir, { h2 = false } = {}) {
  const certs = makeUpstreamCerts(dir);
  const { child, value: port } = await startChild({
    name: "upstream",
    cmd: process.execPath,
    args: [
      path.join(ROOT, "bench", "upstream.mjs"),
      JSON.stringify({
        cert: certs.cert,
        key: certs.key,
        realKey: REAL_KEY,
        placeholders: [PLACEHOLDER, WILD_PLACEHOLDER],
        h2,
      }),
    ],
    env: process.env,
    logFile: path.join(dir, "upstream.log"),
    ready: (line) => (line.startsWith("{") ? JSON.parse(line).port : null),
  });
  return { child, upstream: { port, ca: certs.ca, caPem: fs.readFileSync(certs.ca), pid: child.pid } };
}

/** Stores a login with `REAL_KEY` as its access token for each provider, as `auth add` would. */
function storeBenchLogins(home) {
  const tokens = path.join(home, "tokens");
  fs.mkdirSync(tokens, { recursive: true, mode: 0o700 });
  const now = Date.now();
  for (const provider of ["bench", "wild"]) {
    const login = {
      version: 1,
      provider,
      id: "default",
      accessToken: REAL_KEY,
      refreshToken: "bench-refresh-token-never-sent",
      expiresAt: now + 365 * 86_400_000,
      issuedAt: now,
      createdAt: now,
      generation: 1,
      state: "ok",
    };
    fs.writeFileSync(path.join(tokens, `${provider}~default.json`), JSON.stringify(login), { mode: 0o600 });
  }
}

/**
 * Starts one broker. `home` may be shared between brokers run one after the other (the CA is
 * made once). `nodeOptions` are flags for the broker's node (V8 flags such as
 * `--max-semi-space-size=2`). Resolves `{child, pid, port, proxyUrl, caPem, stop}`.
 */
export async function startBroker({ dir, home, name, upstream, wildHosts, variant, nodeOptions }) {
  if (variant?.oauth) storeBenchLogins(home);
  const config = path.join(dir, `keybroker-${name}.yaml`);
  fs.writeFileSync(
    config,
    ruleFile({ upstreamPort: upstream.port, upstreamCa: upstream.ca, wildHosts, variant }),
  );
  const logFile = path.join(dir, `keybroker-${name}.log`);
  const flags = variant?.nodeOptions ?? nodeOptions;
  const args = [...flags, BROKER_MAIN, "start", "--home", home, "--config", config, "--port", "0"];
  let started;
  try {
    started = await startChild({
      name: `keybroker (${name})`,
      cmd: process.execPath,
      args,
      env: { ...process.env, BENCH_REAL_KEY: REAL_KEY, ...variant?.env },
      logFile,
      ready: (line) => /keybroker listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(line)?.[1],
    });
  } catch (err) {
    const log = fs.existsSync(logFile) ? fs.readFileSync(logFile, "utf8").trim().split("\n").slice(-15) : [];
    err.message += `\n  rule file: ${config}\n  broker log (${logFile}):\n    ${log.join("\n    ")}`;
    throw err;
  }
  const { child, value: port } = started;
  return {
    child,
    pid: child.pid,
    port: Number(port),
    proxyUrl: `http://127.0.0.1:${port}`,
    caPem: fs.readFileSync(path.join(home, "ca", "ca.pem")),
    config,
    logFile,
    stop: () => stopChild(child),
  };
}

/**
 * A redis-server for the `fleet-redis` variant (state: redis://): a free loopback port, its own
 * folder, nothing saved. Resolves `{url, stop}`.
 */
export async function startRedis(dir) {
  const probe = net.createServer().listen(0, "127.0.0.1");
  await new Promise((resolve) => probe.once("listening", resolve));
  const port = probe.address().port;
  await new Promise((resolve) => probe.close(resolve));
  const folder = path.join(dir, "redis");
  fs.mkdirSync(folder, { recursive: true });
  const { child } = await startChild({
    name: "redis-server",
    cmd: "redis-server",
    args: [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--dir",
      folder,
      "--save",
      "",
      "--appendonly",
      "no",
    ],
    env: process.env,
    logFile: path.join(dir, "redis.log"),
    ready: (line) => (line.includes("Ready to accept connections") ? true : null),
  });
  return { url: `redis://127.0.0.1:${port}/0`, stop: () => stopChild(child) };
}
