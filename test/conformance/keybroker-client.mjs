// The "client" the official MCP conformance suite (`conformance client --suite auth`) drives:
// keybroker's login plus the SDK's own Client, with no auth provider, through the mount. Given
// the scenario's server URL (the last argument), it writes a rule file with `mcp: <url>`, runs
// `keybroker auth add` (acting as the browser: the suite's authorization server approves at
// once), starts the broker, and has the SDK client initialize, list tools and call the first.
// A pre-registered client in MCP_CONFORMANCE_CONTEXT becomes `oauth.client_id`/`client_secret`.
import { spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const CLI = resolve(import.meta.dirname, "../../dist/cli/main.js");
const url = process.argv.at(-1);
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT ?? "{}");
const home = mkdtempSync(join(tmpdir(), "kb-conformance-"));
const oauth = [
  "token_timeout: 5s",
  "client_metadata_url: https://conformance-test.local/client-metadata.json",
];
const env = { PATH: process.env.PATH, HOME: process.env.HOME };
if (context.client_id !== undefined) oauth.push(`client_id: ${JSON.stringify(context.client_id)}`);
if (context.client_secret !== undefined) {
  oauth.push("client_secret: env:CONFORMANCE_CLIENT_SECRET");
  env.CONFORMANCE_CLIENT_SECRET = context.client_secret;
}
const config = join(home, "keybroker.yaml");
writeFileSync(
  config,
  `version: 1
catalogue: false
providers:
  conf:
    mcp: ${url}
    allow_private_upstream: true
    oauth:
${oauth.map((l) => `      ${l}`).join("\n")}
`,
);
const args = ["--home", home, "--config", config];

async function freePort() {
  const s = createServer().listen(0, "127.0.0.1");
  await once(s, "listening");
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

/** Runs `keybroker <argv>` until its output matches `pattern`: the match, and its exit. */
async function keybroker(argv, pattern) {
  const child = spawn(process.execPath, [CLI, ...argv, ...args], {
    env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  const closed = new Promise((ok) => child.once("close", ok));
  const match = await new Promise((ok, fail) => {
    child.stdout.on("data", (d) => {
      out += d;
      const m = pattern.exec(out);
      if (m) ok(m[1]);
    });
    closed.then((code) => fail(new Error(`keybroker ${argv[0]} ended (${code}): ${out}`)));
  });
  return { match, closed, out: () => out, stop: () => child.kill("SIGTERM") };
}

/** `keybroker auth add conf`, with this script as the browser. */
async function login() {
  const port = String(await freePort());
  const run = await keybroker(["auth", "add", "conf", "--no-browser", "--port", port], /open: (\S+)/);
  const res = await fetch(run.match, { redirect: "manual" });
  const back = res.headers.get("location");
  if (back === null) throw new Error(`the authorization server answered ${res.status}`);
  await (await fetch(back)).text();
  const code = await run.closed;
  process.stderr.write(run.out());
  if (code !== 0) throw new Error(`auth add failed (${code})`);
}

async function startBroker() {
  const run = await keybroker(["start", "--port", "0"], /listening on (http:\/\/\S+)/);
  return { base: run.match, stop: run.stop };
}

/** Connects once the broker serves the new login (it follows the token store). */
async function connect(mount) {
  for (let tries = 0; ; tries++) {
    const client = new Client({ name: "keybroker-conformance", version: "1.0.0" });
    try {
      await client.connect(new StreamableHTTPClientTransport(mount));
      return client;
    } catch (err) {
      if (tries >= 50) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

// The broker starts while the user logs in, and takes the login up when it is stored.
const starting = startBroker();
try {
  await login();
  const broker = await starting;
  const mount = new URL(`${broker.base}/p/conf${new URL(url).pathname}`);
  const client = await connect(mount);
  const { tools } = await client.listTools();
  if (tools[0] !== undefined) await client.callTool({ name: tools[0].name, arguments: {} });
  await client.close();
} catch (err) {
  process.stderr.write(`${err.stack ?? err}\n`);
  process.exitCode = 1;
} finally {
  (await starting.catch(() => undefined))?.stop();
  spawnSync("rm", ["-rf", home]);
}
