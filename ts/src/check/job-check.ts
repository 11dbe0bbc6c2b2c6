/**
 * `lego check --config FILE.toml`: the training job checked before it runs, by the Python side
 * that owns the job's types (lego_rl/trainer/plan.py, through `python -m lego_rl.trainer.check_job`):
 * types and keys, the model's config.json, experts divisible by the expert-parallel size, the
 * placement-group bundles against the declared [hardware], the memory per GPU, the engines.
 * Reads only the file and config.json, so it never needs weights, Ray or a GPU.
 */
import { spawnSync } from "node:child_process";
import { PYTHON } from "../json-line-process.ts";
import type { CheckResult } from "./preflight.ts";

/** One CheckResult per line the job checker prints (`job: …` when the checker itself cannot run). */
export function checkJobFile(configPath: string, timeoutMs: number): CheckResult[] {
  const run = spawnSync(PYTHON, ["-m", "lego_rl.trainer.check_job", configPath], { encoding: "utf8", timeout: timeoutMs });
  const lines = (run.stdout ?? "").split("\n").filter((line) => line.startsWith("{"));
  if (run.error || lines.length === 0) {
    return [{ name: "job", ok: false, detail: `${PYTHON} -m lego_rl.trainer.check_job ${configPath} gave no result: ${run.error?.message ?? run.stderr.trim()}`,
      fix: "run `scripts/setup`, which makes the Python environment (.venv) the checker runs in" }];
  }
  return lines.map((line) => {
    const c = JSON.parse(line) as { name: string; ok: boolean; detail: string; fix?: string; skipped?: boolean };
    return { name: c.name, ok: c.ok, detail: c.detail, ...(c.fix ? { fix: c.fix } : {}), ...(c.skipped ? { skipped: true } : {}) };
  });
}
