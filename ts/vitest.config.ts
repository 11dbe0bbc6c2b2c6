import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["src/**/*.test.ts", "../tests/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Tests that spawn processes or a daemon share two cores; keep the pool small.
    maxWorkers: 2,
    // Unmounts each test process's prepared quota filesystems (src/test-teardown.ts says why).
    setupFiles: ["src/test-teardown.ts"],
  },
});
