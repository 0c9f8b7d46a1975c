// The project's vitest settings plus the child-process counter: see docs/performance.md, "Test suite".
import { join } from "node:path";
import { defineConfig, mergeConfig } from "vitest/config";
import base from "../../vitest.config.js";

export default mergeConfig(
  base,
  defineConfig({
    test: { root: join(import.meta.dirname, "../.."), setupFiles: ["bench/test-suite/count-spawns.ts"] },
  }),
);
