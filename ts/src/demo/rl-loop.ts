/**
 * The most complete path that works until the end-to-end demo exists: GSPO on
 * Ray with the embedded engine on a built-in toy task. A tiny MoE policy
 * (byte-level tokenizer, random init, built here) samples rollouts in an engine
 * actor that records logprobs and expert routing; the rollouts become Arrow
 * batches in the shared schema; a trainer actor recomputes logprobs with routing
 * replay, takes a GSPO step, checkpoints, and publishes the new weights to the
 * engine. It says plainly what it does not do yet.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT } from "../repo-root.ts";

export interface RlLoopOptions {
  /** Working folder: the model, checkpoints and step log go here. */
  readonly workDir: string;
  /** GSPO steps to run. */
  readonly steps: number;
}

interface StepLine {
  step: number;
  policy_version: number;
  "mismatch/pearson_prob"?: number;
  "routing/replay_disagreement"?: number;
  "time/step_s": number;
}

function run(python: string, args: string[]): void {
  const result = spawnSync(python, args, { stdio: ["ignore", "inherit", "inherit"], cwd: REPO_ROOT });
  if (result.error) throw result.error;
  if (result.status !== 0) throw new Error(`${args.slice(0, 2).join(" ")} exited with ${result.status}`);
}

export function runRlLoop(options: RlLoopOptions): void {
  console.log(
    "lego demo --toy: the trainer alone, without harness, proxy or sandbox (plain `lego demo` runs the whole loop).\n" +
      "GSPO on Ray with routing replay, the embedded engine sampling a\n" +
      "built-in toy task (reward = share of lowercase letters in the completion) with a tiny MoE policy.\n" +
      "The engine samples in bf16 and the trainer recomputes in fp32, as on GPUs.\n",
  );
  const python = join(REPO_ROOT, ".venv/bin/python");
  const model = join(options.workDir, "tiny-moe");
  const checkpoints = join(options.workDir, "checkpoints");
  const log = join(options.workDir, "steps.jsonl");
  mkdirSync(options.workDir, { recursive: true });
  rmSync(checkpoints, { recursive: true, force: true });
  rmSync(log, { force: true });
  if (!existsSync(join(model, "config.json"))) {
    run(python, ["-m", "lego_rl.model.tiny", "--out", model, "--tokenizer", "bytes", "--seed", "0"]);
  }
  console.log(`policy: ${model} (4 layers, 8 experts, top-2; random init)\n`);
  const result = spawnSync(
    python,
    ["-m", "lego_rl.cluster.train", "--model", model, "--checkpoints", checkpoints, "--toy-steps", String(options.steps),
      "--lr", "3e-3", "--engine-dtype", "bfloat16", "--log", log],
    { cwd: REPO_ROOT, encoding: "utf8", env: { ...process.env, RAY_AUTH_MODE: "disabled" }, stdio: ["ignore", "pipe", "pipe"] },
  );
  if (result.status !== 0) {
    process.stderr.write(result.stderr.slice(-4000));
    throw new Error(`the training run exited with ${result.status}`);
  }
  for (const line of readFileSync(log, "utf8").trim().split("\n")) {
    const step = JSON.parse(line) as StepLine;
    console.log(
      `step ${String(step.step).padStart(3)}  policy v${step.policy_version}  ` +
        `rollout/trainer Pearson ${step["mismatch/pearson_prob"]?.toFixed(6) ?? "-"}  ` +
        `replayed-vs-own routing differs on ${((step["routing/replay_disagreement"] ?? 0) * 100).toFixed(1)}% of tokens  ` +
        `${step["time/step_s"].toFixed(2)} s`,
    );
  }
  const summary = JSON.parse(result.stdout.trim().split("\n").at(-1)!) as { reward_first: number; reward_last: number };
  console.log(
    `\nmean reward: first fifth of the steps ${summary.reward_first.toFixed(3)}, last fifth ${summary.reward_last.toFixed(3)}` +
      `\ncheckpoints: ${checkpoints}\nstep log: ${log}`,
  );
}
