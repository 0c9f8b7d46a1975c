// A broker loads only the parts of undici it forwards with (proxy/upstream.ts: the Agent, the
// connector, the request API). undici's index (fetch, WebSocket, the cache and mock agents, about
// 8 MiB resident) is loaded on the first OAuth call that needs fetch, never at start or for a
// proxied request: the broker itself is the process looked at, through a preload that reports
// which of undici's files it loaded when it exits.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { expect, it } from "vitest";
import { tempHome } from "../helpers/broker.js";
import { chatThrough, startFixture } from "../helpers/fixture.js";

it("a broker that forwarded a request has not loaded undici's index", async () => {
  const dir = tempHome();
  const report = join(dir, "undici-files.json");
  const probe = join(dir, "probe.cjs");
  // Only the broker reports (its rule loader, a child of its own, has other modules).
  writeFileSync(
    probe,
    `process.on("exit", () => {
      if (!process.argv[1].endsWith("main.js")) return;
      const files = Object.keys(require.cache).filter((k) => k.includes("/node_modules/undici/"));
      require("node:fs").writeFileSync(${JSON.stringify(report)}, JSON.stringify(files));
    });\n`,
  );
  const f = await startFixture({ env: { NODE_OPTIONS: `--require ${probe}` } });
  try {
    expect((await chatThrough(f)).status).toBe(200);
  } finally {
    await f.close();
  }
  const files = (JSON.parse(readFileSync(report, "utf8")) as string[]).map(
    (k) => k.split("/node_modules/undici/")[1] ?? k,
  );
  // The probe sees undici: the Agent the request went through.
  expect(files).toContain("lib/dispatcher/agent.js");
  expect(files).not.toContain("index.js");
  expect(files.filter((k) => k.startsWith("lib/web/"))).toEqual([]);
});
