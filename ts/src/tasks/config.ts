/**
 * The tasks component's one config, with its defaults. Entry points (the CLI,
 * benches, tests) build it; nothing below reads the environment.
 */
import { homedir } from "node:os";
import { join } from "node:path";

export interface TasksConfig {
  /**
   * Generated material, content-addressed and safe to delete: environments
   * (`env/`), materialised task folders (`task/`), generated suites
   * (`suites/`), health-check results (`health.json`).
   */
  cacheDir: string;
  /** Source distributions of the mined suite's projects (scripts/setup fetches them). */
  sdistDir: string;
  /** Folders searched for a SWE-bench record's `repo` (`owner__name`, `name`, or an archive of either). */
  repoRoots: string[];
}

export function defaultTasksConfig(home = homedir()): TasksConfig {
  const cacheDir = join(home, ".cache/lego-rl/tasks");
  return { cacheDir, sdistDir: join(home, ".cache/lego-rl/sdists"), repoRoots: [] };
}
