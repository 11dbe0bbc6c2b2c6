/**
 * Vitest setup file (vitest.config.ts `setupFiles`): after each test file,
 * unmounts the quota filesystems its process prepared and no container took.
 * Vitest ends a test file's worker with a signal, so the pool's exit hook
 * never runs there; without this each test file would leave its staging
 * mounts for the next reaper.
 */
import { afterAll } from "vitest";
import { drainQuotaPools } from "./sandbox/index.ts";

afterAll(drainQuotaPools);
