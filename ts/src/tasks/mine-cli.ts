/** `lego tasks mine`: generate the builtin suite (see mine.ts). Long: minutes per project on 2 cores. */
import type { Argv } from "yargs";
import type { LegoCommand } from "../lego-command.ts";
import { defaultTasksConfig } from "./config.ts";
import { DEFAULT_MINE, mineBuiltin } from "./mine.ts";
import { BUILTIN_PROJECTS } from "./projects.ts";
import { builtinSuiteDir } from "./suites.ts";

export const mineCommand: LegoCommand = {
  command: "mine",
  describe: "mine the builtin suite from the pinned projects' sdists (bugs their own tests catch)",
  builder: (y: Argv) =>
    y
      .option("project", { type: "string", array: true, choices: BUILTIN_PROJECTS.map((p) => p.name), describe: "only these projects (default: all)" })
      .option("seed", { type: "number", default: DEFAULT_MINE.seed })
      .option("max-candidates", { type: "number", default: DEFAULT_MINE.maxCandidates, describe: "mutations tried per project" })
      .option("max-tasks", { type: "number", describe: "tasks kept per project at most (default: each project's own cap)" })
      .option("cache-dir", { type: "string", default: defaultTasksConfig().cacheDir })
      .option("sdist-dir", { type: "string", default: defaultTasksConfig().sdistDir })
      .option("out", { type: "string", describe: "suite folder (default: the cache's builtin suite, which `--tasks builtin` reads)" }),
  handler: async (a) => {
    const cfg = { ...defaultTasksConfig(), cacheDir: a["cache-dir"] as string, sdistDir: a["sdist-dir"] as string };
    const out = (a.out as string | undefined) ?? builtinSuiteDir(cfg);
    const stats = await mineBuiltin(cfg, out, {
      seed: a.seed as number,
      projects: a.project as string[] | undefined,
      maxCandidates: a["max-candidates"] as number,
      maxTasks: a["max-tasks"] as number | undefined,
      log: (l) => process.stderr.write(`${l}\n`),
    });
    for (const s of stats) process.stdout.write(`${JSON.stringify({ event: "mined", ...s })}\n`);
    process.stdout.write(`${JSON.stringify({ event: "summary", out, tasks: stats.reduce((a, s) => a + s.kept, 0), tried: stats.reduce((a, s) => a + s.tried, 0) })}\n`);
  },
};
