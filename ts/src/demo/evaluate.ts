/**
 * The demo's held-out evaluation: a model directory served by the real Python
 * engine (`python -m lego_rl.engine`), the reference harness in Docker sandboxes
 * through the proxy (`lego eval --engine tcp://… --model-dir …`), on the `test`
 * split of evaluation seeds no demonstration was drawn from. The same seeds and
 * sampling settings before and after training make the two figures comparable.
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { REPO_ROOT } from "../repo-root.ts";
import type { EvalReport } from "../tasks/index.ts";
import { JsonLineProcess, PYTHON } from "../json-line-process.ts";

const LEGO = join(REPO_ROOT, "ts/bin/lego");

export interface HeldOutEval {
  tasks: string;
  harness: string;
  /** `test`: only the source's held-out split; undefined: every task. */
  split: "test" | undefined;
  k: number;
  maxTokensPerTurn: number;
  maxTurns: number;
  temperature: number;
}

/**
 * pass@1 (mean reward) of `modelDir` on the held-out tasks; the report is also written to `reportPath`.
 * The `lego eval` process's pid is pushed on `pids`, so the caller can check it left no sandbox behind.
 */
export async function evaluateHeldOut(modelDir: string, cfg: HeldOutEval, reportPath: string, pids: number[] = []): Promise<EvalReport> {
  const engine = new JsonLineProcess("engine", PYTHON, ["-m", "lego_rl.engine", "--model", modelDir, "--bind", "tcp://127.0.0.1:*"]);
  try {
    const address = (await engine.waitFor((e) => e.type === "listening", 120_000)).address as string;
    const evaluating = promisify(execFile)(LEGO, [
      "eval", "--tasks", cfg.tasks, ...(cfg.split ? ["--split", cfg.split] : []), "--harness", cfg.harness, "--engine", address, "--model-dir", modelDir,
      "--k", String(cfg.k), "--max-tokens-per-turn", String(cfg.maxTokensPerTurn), "--max-turns", String(cfg.maxTurns),
      "--temperature", String(cfg.temperature), "--report", reportPath,
    ], { timeout: 1_800_000, maxBuffer: 1 << 26, cwd: REPO_ROOT });
    if (evaluating.child.pid) pids.push(evaluating.child.pid);
    await evaluating;
  } finally {
    engine.stop();
  }
  return JSON.parse(readFileSync(reportPath, "utf8")) as EvalReport;
}
