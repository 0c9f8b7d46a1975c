import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

// Test files spend much of their time waiting on sockets, brokers, child processes and timers,
// not on CPU. Vitest's default (one worker per core, less one) ran them one after another on a
// 2-core machine and left a core idle (decision 57); one worker per core still left about a
// third of the CPU idle, one more than the cores uses it (decision 177). VITEST_MAX_WORKERS
// still overrides it.
const WORKERS = availableParallelism() + 1;

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The MCP conformance suite runs on its own (npm run test:conformance).
    exclude: process.env.KEYBROKER_CONFORMANCE
      ? ["**/node_modules/**"]
      : ["test/conformance/**", "**/node_modules/**"],
    // Rebuilds dist/ when a source is newer than its build: the CLI tests run dist/.
    globalSetup: ["test/global-setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: "forks",
    maxWorkers: WORKERS,
    coverage: {
      include: [
        "admin/**",
        "proxy/**",
        "certs/**",
        "rules/**",
        "cli/**",
        "secrets/**",
        "state/**",
        "audit/**",
        "core/**",
        "metrics/**",
      ],
    },
  },
});
