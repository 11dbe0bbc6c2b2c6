/**
 * `lego sandbox …`: build-base, build TASK_DIR, check TASK_DIR…, reap, gc.
 * Output is one JSON object per line, so scripts and CI can read it.
 */
import type { Argv } from "yargs";
import type { LegoCommand } from "../lego-command.ts";
import { DEFAULT_BASE, ensureBaseImage } from "./base-image.ts";
import { checkTask } from "./check.ts";
import { collectImages } from "./image-gc.ts";
import { reapDeadRuns } from "./reaper.ts";
import { RolloutRunner } from "../rollout/index.ts";
import { loadTask } from "./task.ts";
import { ensureTaskImage } from "./task-image.ts";

const print = (o: unknown) => process.stdout.write(`${JSON.stringify(o)}\n`);
const progress = (line: string) => process.stderr.write(`${line}\n`);

export const sandboxCommand: LegoCommand = {
  command: "sandbox <command>",
  describe: "build, check and manage Docker sandboxes",
  builder: (y: Argv) =>
    y
      .command(
        "build-base",
        "build the local base image (debootstrap through this machine's apt mirror, docker import)",
        (b) => b.option("package", { type: "string", array: true, describe: "extra Debian packages" }),
        async (a) => {
          const spec = { ...DEFAULT_BASE, packages: [...DEFAULT_BASE.packages, ...((a.package as string[] | undefined) ?? [])] };
          print({ event: "base", ...(await ensureBaseImage(spec, progress)) });
        },
      )
      .command(
        "build <task_dir>",
        "build (or find cached) the image of a Harbor-style task directory",
        (b) => b.positional("task_dir", { type: "string", demandOption: true }),
        async (a) => {
          const base = await ensureBaseImage(DEFAULT_BASE, progress);
          print({ event: "task-image", ...(await ensureTaskImage(loadTask(a.task_dir as string), base.tag, { log: progress })) });
        },
      )
      .command(
        "check <task_dirs..>",
        "gold patch must score 1, empty patch 0; failing images are quarantined",
        (b) =>
          b
            .positional("task_dirs", { type: "string", array: true, demandOption: true })
            .option("concurrency", { type: "number", default: 2 }),
        async (a) => {
          const runner = await RolloutRunner.create({ concurrency: a.concurrency as number });
          let unhealthy = 0;
          try {
            for (const dir of a.task_dirs as string[]) {
              const r = await checkTask(dir, runner);
              if (!r.healthy) unhealthy++;
              print({ event: "check", task: r.task, image: r.image, healthy: r.healthy, reason: r.reason,
                gold: r.gold && { status: r.gold.status, reward: r.gold.reward }, empty: r.empty && { status: r.empty.status, reward: r.empty.reward } });
            }
          } finally {
            await runner.close();
          }
          if (unhealthy) process.exitCode = 1;
        },
      )
      .command("reap", "remove containers (and prepared quota filesystems) left by dead runs", {}, async () => {
        const r = await reapDeadRuns();
        print({ event: "reap", removed: r.removed.length, kept: r.kept, quota_staging_removed: r.quotaStaging.length });
      })
      .command(
        "gc",
        "remove sandbox images unused for --max-age-hours, keeping the --keep most recently used task images",
        (b) => b.option("max-age-hours", { type: "number", default: 168 }).option("keep", { type: "number", default: 50 }),
        async (a) => {
          print({ event: "gc", ...(await collectImages({ maxAgeMs: (a["max-age-hours"] as number) * 3600_000, keep: a.keep as number })) });
        },
      )
      .demandCommand(1, "Name a sandbox subcommand: build-base, build, check, reap, gc."),
  handler: () => {},
};
