// The official MCP conformance suite (`@modelcontextprotocol/conformance`, client mode, the
// scenarios of its `auth` suite) against keybroker's login plus the SDK client through the
// mount (keybroker-client.mjs). It needs Node 22; it runs offline. One scenario at a time: the
// suite's own `--suite auth` starts all 14 at once, three processes each, which times out on two
// cores. Not part of `npm test`: `npm run test:conformance`, which .ci/run calls.
// KEYBROKER_CONFORMANCE_SCENARIOS=auth/a,auth/b runs only those.
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { expect, it } from "vitest";
import { ROOT } from "../helpers/broker.js";
import { nodeBinary } from "../helpers/node-versions.js";

const run = promisify(execFile);

/** The `auth` suite of conformance 0.1.16 (`conformance list --client`). */
const AUTH_SUITE = [
  "auth/metadata-default",
  "auth/metadata-var1",
  "auth/metadata-var2",
  "auth/metadata-var3",
  "auth/basic-cimd",
  "auth/scope-from-www-authenticate",
  "auth/scope-from-scopes-supported",
  "auth/scope-omitted-when-undefined",
  "auth/scope-step-up",
  "auth/scope-retry-limit",
  "auth/token-endpoint-auth-basic",
  "auth/token-endpoint-auth-post",
  "auth/token-endpoint-auth-none",
  "auth/pre-registration",
];

const only = process.env.KEYBROKER_CONFORMANCE_SCENARIOS?.split(",").filter((s) => s !== "");

it("passes the auth scenarios, except the expected failures listed with their reasons", async () => {
  const node = await nodeBinary(22);
  const suite = join(ROOT, "node_modules/@modelcontextprotocol/conformance/dist/index.js");
  const client = `${process.execPath} ${join(ROOT, "test/conformance/keybroker-client.mjs")}`;
  const outcomes: string[] = [];
  for (const scenario of only ?? AUTH_SUITE) {
    const argv = [suite, "client", "--command", client, "--scenario", scenario, "--timeout", "90000"];
    argv.push("--expected-failures", join(ROOT, "test/conformance/expected-failures.yaml"));
    const result = await run(node, argv, {
      cwd: join(ROOT, "node_modules/.cache"),
      timeout: 120_000,
      maxBuffer: 64 * 1024 * 1024,
    }).catch((err: { code?: number; stdout?: string; stderr?: string }) => err);
    const code = (result as { code?: number }).code ?? 0;
    const out = `${result.stdout ?? ""}${result.stderr ?? ""}`;
    outcomes.push(`${scenario}: ${code === 0 ? "as expected" : `FAILED\n${out.slice(-3000)}`}`);
  }
  expect(outcomes.filter((o) => !o.endsWith("as expected"))).toEqual([]);
}, 1_800_000);
