/**
 * The demo's warm start: demonstrations of the `easy` family in the reference
 * harness's exact format, then a short supervised pass on the tiny Qwen3-vocabulary MoE.
 *
 * Demonstrations are real rollouts: `lego rollout --harness reference --engine
 * scripted-edit` in Docker sandboxes, through the proxy, shipped to a real receiver,
 * so the token ids trained on are exactly what the proxy recorded (chat template,
 * tool-call format, tool outputs) and what the policy would have to emit. They are
 * generated on first use and cached under ~/.cache/lego-rl/demos (never committed);
 * a folder only counts once its manifest is written, after every rollout succeeded.
 */
import { execFile, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { REPO_ROOT } from "../repo-root.ts";
import { baseImageTag } from "../sandbox/index.ts";
import { defaultTasksConfig, openTaskSource, taskHash, type TasksConfig } from "../tasks/index.ts";
import { JsonLineProcess, PYTHON } from "../json-line-process.ts";

const LEGO = join(REPO_ROOT, "ts/bin/lego");

/**
 * Training demonstrations and evaluation tasks come from different seeds of the family, and training uses only
 * the `train` split: the evaluation's held-out (`test`) tasks call functions under names no demonstration and no
 * GSPO task uses. The counts are chosen for 24 demonstrations and 65 GSPO tasks once the test split is dropped.
 */
export const DEMO_TASKS = "easy:seed=101,count=33,template=comparison,module=calc,split=train";
export const EVAL_TASKS = "easy:seed=7,count=40,template=comparison,module=calc";
/** GSPO's tasks, one group per step: the same seed as the demonstrations (65 once the test split is dropped; the demo runs 64 steps). */
export const TRAIN_TASKS = "easy:seed=101,count=77,template=comparison,module=calc,split=train";
/** Demonstrations are the gold fix said with the edit tool: what the instruction determines, no file read first. */
export const DEMO_ENGINE = "scripted-edit";

export class WarmStartError extends Error {}

export interface DemonstrationsManifest {
  tasks: string;
  harness: string;
  trajectories: number;
  createdAt: string;
}

export function defaultCacheRoot(home = homedir()): string {
  return join(home, ".cache/lego-rl");
}

/**
 * The folder of `tasks`' demonstrations: named by the source and a digest of its tasks' contents, because a
 * source's name can stay while its tasks change (a new easy-family recipe keeps the ids and the seed): the
 * old folder must not be taken for the new tasks' demonstrations.
 */
export async function demonstrationsDir(cacheRoot: string, tasks: string, tasksConfig: TasksConfig = defaultTasksConfig()): Promise<string> {
  const digest = createHash("sha256");
  for (const t of (await openTaskSource(tasks, tasksConfig)).tasks) {
    const def = await t.definition();
    // taskHash covers what grading depends on; a demonstration also depends on the instruction it answers.
    digest.update(`${t.id}\0${taskHash(def, baseImageTag())}\0${def.instruction}\0`);
  }
  return join(cacheRoot, "demos", `reference-${DEMO_ENGINE}`, `${tasks.replace(/[^A-Za-z0-9_.-]+/g, "_")}-${digest.digest("hex").slice(0, 12)}`);
}

/** The cached demonstrations of `tasks` (a receiver spool), generated first if absent. */
export async function ensureDemonstrations(opts: { cacheRoot: string; tasks: string; tasksConfig?: TasksConfig; log?: (l: string) => void }): Promise<{ dir: string; manifest: DemonstrationsManifest }> {
  const dir = await demonstrationsDir(opts.cacheRoot, opts.tasks, opts.tasksConfig);
  const manifestPath = join(dir, "manifest.json");
  if (existsSync(manifestPath)) return { dir, manifest: JSON.parse(readFileSync(manifestPath, "utf8")) as DemonstrationsManifest };
  const partial = `${dir}.partial-${process.pid}`;
  rmSync(partial, { recursive: true, force: true });
  mkdirSync(partial, { recursive: true });
  opts.log?.(`generating demonstrations (${opts.tasks}, reference harness, ${DEMO_ENGINE} engine) into ${dir}`);
  const receiver = new JsonLineProcess("receiver", PYTHON, ["-m", "lego_rl.transport", "receive", "--bind", "tcp://127.0.0.1:*", "--spool", join(partial, "rx")]);
  let summary: Record<string, unknown>;
  try {
    const address = (await receiver.waitFor((e) => e.type === "listening", 30_000)).address as string;
    const { stdout } = await promisify(execFile)(LEGO, [
      "rollout", "--tasks", opts.tasks, "--harness", "reference", "--engine", DEMO_ENGINE, "--group-size", "1", "--concurrency", "2",
      "--trainer", address, "--spool-dir", join(partial, "sender"), "--producer-id", "demo-demonstrations",
    ], { timeout: 1_800_000, maxBuffer: 1 << 26, cwd: REPO_ROOT });
    summary = JSON.parse(stdout.trim().split("\n").at(-1)!) as Record<string, unknown>;
  } finally {
    receiver.stop();
  }
  const shipped = summary.trajectoriesShipped as number;
  const reward = (summary.rewardByHarness as Record<string, number>)[`reference/${DEMO_ENGINE}`];
  // The gold solution must solve every task it replays; a demonstration set that does not is a broken task family.
  if (summary.droppedEnvErrors !== 0 || reward !== 1 || !shipped) {
    throw new WarmStartError(`demonstrations incomplete (kept in ${partial}): ${JSON.stringify({ shipped, reward, droppedEnvErrors: summary.droppedEnvErrors })}`);
  }
  const manifest: DemonstrationsManifest = { tasks: opts.tasks, harness: `reference/${DEMO_ENGINE}`, trajectories: shipped, createdAt: new Date().toISOString() };
  writeFileSync(join(partial, "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  rmSync(join(partial, "sender"), { recursive: true, force: true });
  mkdirSync(join(dir, ".."), { recursive: true });
  rmSync(dir, { recursive: true, force: true });
  renameSync(partial, dir);
  return { dir, manifest };
}

export interface SftSummary {
  model_dir: string;
  demonstrations: number;
  steps: number;
  /** The demonstrations' mean whole-action probability at the last check (null: never checked). */
  action_probability: number | null;
  loss_first: number;
  loss_last: number;
  seconds: number;
}

function python(args: string[], what: string): string {
  const r = spawnSync(PYTHON, args, { cwd: REPO_ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 1 << 26 });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new WarmStartError(`${what} exited with ${r.status}: ${r.stderr.trim().split("\n").at(-1)}`);
  return r.stdout;
}

/** The tiny randomly initialised MoE with the Qwen3 vocabulary in workDir, built if absent; returns its directory. */
export function baseModel(workDir: string, seed = 0): string {
  // One folder per seed: a run folder reused with another --seed must not start from the old seed's weights.
  const base = join(workDir, `tiny-qwen3-seed${seed}`);
  if (!existsSync(join(base, "config.json"))) {
    python(["-m", "lego_rl.model.tiny", "--out", base, "--tokenizer", "qwen3", "--seed", String(seed)], "building the tiny model");
  }
  return base;
}

/**
 * The tiny randomly initialised MoE with the Qwen3 vocabulary, then SFT on the demonstrations into workDir/warm-start.
 * `stopAt`: stop once the demonstrations' mean whole-action probability reaches it (`steps` is then a cap).
 */
export function warmStart(opts: { workDir: string; demonstrations: string; steps: number; lr?: number; batch?: number; seed?: number; stopAt?: number }): SftSummary {
  const base = baseModel(opts.workDir, opts.seed ?? 0);
  const out = join(opts.workDir, "warm-start");
  rmSync(out, { recursive: true, force: true });
  const stdout = python(["-m", "lego_rl.trainer.sft", "--spool", join(opts.demonstrations, "rx"), "--model-dir", base, "--out", out,
    "--steps", String(opts.steps), "--seed", String(opts.seed ?? 0),
    ...(opts.lr === undefined ? [] : ["--lr", String(opts.lr)]), ...(opts.batch === undefined ? [] : ["--batch", String(opts.batch)]),
    ...(opts.stopAt === undefined ? [] : ["--stop-at-action-probability", String(opts.stopAt)])], "the supervised warm start");
  return JSON.parse(stdout.trim().split("\n").at(-1)!) as SftSummary;
}
