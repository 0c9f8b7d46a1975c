import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

// Test files spend much of their time waiting on sockets, brokers, child processes and timers,
// not on CPU. Vitest's default (one worker per core, less one) ran them one after another on a
// 2-core machine and left a core idle (decision 57); one worker per core still left about a
// third of the CPU idle, one more than the cores uses it (decision 177). VITEST_MAX_WORKERS
// still overrides it.
const WORKERS = availableParallelism() + 1;

// Test files share their worker process, one after the other (decision 196): each file loading
// the project's modules anew cost a sixth of the suite's CPU. These files look at the process
// itself (which modules it has loaded, V8's flags and heap) and get one of their own.
const OWN_PROCESS = ["test/integration/metrics-lazy.test.ts", "test/unit/core/v8-tuning.test.ts"];
// The MCP conformance suite runs on its own (npm run test:conformance).
const EXCLUDE = process.env.KEYBROKER_CONFORMANCE
  ? ["**/node_modules/**"]
  : ["test/conformance/**", "**/node_modules/**"];

export default defineConfig({
  test: {
    // Rebuilds dist/ when a source is newer than its build: the CLI tests run dist/.
    globalSetup: ["test/global-setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: "forks",
    maxWorkers: WORKERS,
    projects: [
      {
        extends: true,
        test: {
          name: "shared",
          include: ["test/**/*.test.ts"],
          exclude: [...EXCLUDE, ...OWN_PROCESS],
          isolate: false,
        },
      },
      { extends: true, test: { name: "own-process", include: OWN_PROCESS, isolate: true } },
    ],
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
