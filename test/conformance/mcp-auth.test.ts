// The official MCP conformance suite (`@modelcontextprotocol/conformance`, client mode, suite
// `auth`) against keybroker's login plus the SDK client through the mount
// (keybroker-client.mjs). It needs Node 22; it runs offline. Not part of `npm test` (about a
// minute on two cores): `npm run test:conformance`, which .ci/run calls.
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { expect, it } from "vitest";
import { ROOT } from "../helpers/broker.js";
import { nodeBinary } from "../helpers/node-versions.js";

const run = promisify(execFile);

it("passes the auth scenarios, except the expected failures listed with their reasons", async () => {
  const node = await nodeBinary(22);
  const suite = join(ROOT, "node_modules/@modelcontextprotocol/conformance/dist/index.js");
  const client = `${process.execPath} ${join(ROOT, "test/conformance/keybroker-client.mjs")}`;
  const result = await run(
    node,
    [
      suite,
      "client",
      "--command",
      client,
      "--suite",
      "auth",
      "--timeout",
      "120000",
      "--expected-failures",
      join(ROOT, "test/conformance/expected-failures.yaml"),
    ],
    { cwd: join(ROOT, "node_modules/.cache"), timeout: 600_000, maxBuffer: 64 * 1024 * 1024 },
  ).catch((err: { code?: number; stdout?: string; stderr?: string }) => err);
  const out = `${result.stdout ?? ""}${result.stderr ?? ""}`;
  expect((result as { code?: number }).code ?? 0, out.slice(-4000)).toBe(0);
}, 660_000);
