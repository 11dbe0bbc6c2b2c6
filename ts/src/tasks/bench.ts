/**
 * `pnpm bench:tasks`: health-checked tasks per minute (gold must score 1,
 * empty 0, both through the real stages) on this machine, from a cold health
 * cache. Also: what one image per family saves — building one image per
 * variant (each exported as a self-contained Harbor task) against laying the
 * variant over the shared image.
 *   --n N          easy tasks checked (default 20)
 *   --source SRC   another task source to check instead (e.g. builtin), its first N tasks
 *   --pool N       warm containers per image and stage (default 1)
 * (`pnpm bench:tasks --n 20 --source builtin`)
 * The last line is {"bench":"tasks","tasks_per_min":…}.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { benchFlags, positiveInt } from "../bench/index.ts";
import { RolloutRunner } from "../rollout/index.ts";
import { ensureBaseImage, ensureTaskImage, loadTask, taskImageTag } from "../sandbox/index.ts";
import { defaultTasksConfig } from "./config.ts";
import { exportHarbor } from "./export.ts";
import { checkHealth, HealthStore } from "./health.ts";
import { openTaskSource } from "./sources.ts";

const flags = benchFlags({
  n: { default: "20", describe: "tasks checked" },
  source: { describe: "a task source to check instead of easy, its first N tasks" },
  pool: { default: "1", describe: "warm containers per image and stage" },
});
const n = positiveInt("n", flags.n);
const source = flags.source ?? `easy:seed=99,count=${n}`;
const pool = positiveInt("pool", flags.pool);
const work = mkdtempSync(join(tmpdir(), "lego-bench-tasks-"));
// Sources and generated environments from the usual cache (the builtin suite lives there); health results start empty.
const cfg = defaultTasksConfig();
const log = (s: string) => process.stderr.write(`${s}\n`);
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))] ?? 0;

try {
  const base = await ensureBaseImage(undefined, log);
  const load0 = loadavg()[0]!;
  const t0 = performance.now();
  const set = await openTaskSource(source, cfg);
  const tasks = flags.source ? set.tasks.slice(0, n) : set.tasks;
  await Promise.all(tasks.map((t) => t.definition()));
  const openMs = performance.now() - t0;
  const runner = await RolloutRunner.create({ concurrency: 2, maxAttempts: 1, warmPoolSize: pool });
  const t1 = performance.now();
  let results;
  try {
    results = await checkHealth(tasks, runner, new HealthStore(join(work, "health.json")), { log });
  } finally {
    await runner.close();
  }
  const checkMs = performance.now() - t1;
  const healthy = results.filter((r) => r.healthy).length;
  const perTask = results.map((r) => Math.max(r.gold?.ms ?? 0, r.empty?.ms ?? 0));

  // One image per variant instead: each variant exported with its overlay baked in, built on its own.
  const sample = tasks.filter((t) => t.record).slice(0, 3);
  const dirs = await exportHarbor(sample, join(work, "per-variant"));
  const builds: number[] = [];
  for (const d of dirs) builds.push((await ensureTaskImage(loadTask(d), base.tag, { log })).buildMs);
  // These images were built only for the comparison: remove them.
  for (const d of dirs) execFileSync("docker", ["rmi", "-f", taskImageTag(loadTask(d), base.tag)], { stdio: "ignore" });

  const figures = {
    bench: "tasks",
    tasks_per_min: Math.round((results.length / (checkMs / 60_000)) * 10) / 10,
    source,
    tasks: results.length,
    healthy,
    quarantined: results.length - healthy,
    check_wall_s: Math.round(checkMs / 100) / 10,
    task_p50_s: Math.round(pct(perTask, 50) / 100) / 10,
    task_p90_s: Math.round(pct(perTask, 90) / 100) / 10,
    open_ms: Math.round(openMs),
    image_per_variant_build_ms: builds.length ? Math.round(builds.reduce((a, b) => a + b, 0) / builds.length) : null,
    concurrency: 2,
    warm_pool: pool,
    load_start: Math.round(load0 * 10) / 10,
    load_end: Math.round(loadavg()[0]! * 10) / 10,
    utc: new Date().toISOString(),
  };
  process.stdout.write(`${JSON.stringify(figures)}\n`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
