/**
 * `lego demo --harness H` (the second demo mode) end to end, shortened: the real loop with a
 * harness other than the reference one — its engine, `lego eval` before and after, the Ray
 * trainer receiving, one `lego rollout` group in Docker sandboxes through the proxy — must run
 * to the end and report what happened, even though the tiny model cannot solve anything there.
 *
 * Codex CLI: a reply without a tool call ends its run (docs/harnesses.md), so each rollout is one
 * short engine call. `--sft-steps 0` skips the warm start (demonstrations would cost minutes on a
 * fresh machine and the reference harness's format teaches Codex nothing anyway).
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../repo-root.ts";
import { containersOfProcess } from "../sandbox/index.ts";

const LEGO = join(REPO_ROOT, "ts/bin/lego");
const work = mkdtempSync(join(tmpdir(), "lego-demo-harness-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("lego demo --harness", () => {
  it("runs the whole loop in Codex CLI with the tiny model, reports the rewards and updates honestly, and leaves no sandbox", { timeout: 900_000 }, async () => {
    const run = spawnSync(LEGO, [
      "demo", "--harness", "codex", "--sft-steps", "0", "--steps", "1", "--group-size", "2", "--eval-k", "1", "--no-ui",
      "--tasks", "easy:seed=101,count=1,template=comparison,module=calc",
      // count=5: one task in its test split (held out), so both evaluations stay one rollout each.
      "--eval-tasks", "easy:seed=7,count=5,template=comparison,module=calc", "--work-dir", work,
    ], { cwd: REPO_ROOT, encoding: "utf8", timeout: 840_000 });
    expect(run.status, `${run.stdout.slice(-3000)}\n${run.stderr.slice(-3000)}`).toBe(0);
    const summary = JSON.parse(run.stdout.trim().split("\n").at(-1)!) as Record<string, unknown>;
    expect(summary).toMatchObject({ bench: "demo", harness: "codex", containers_left: 0, k: 1 });
    for (const k of ["reward_before", "reward_after", "pass_at_k_before", "pass_at_k_after"]) expect(summary[k]).toBeGreaterThanOrEqual(0);
    // With one sample per task, pass@k is pass@1.
    expect(summary.pass_at_k_after).toBe(summary.reward_after);
    expect(summary.reward_gain).toBeCloseTo((summary.reward_after as number) - (summary.reward_before as number), 9);

    // One GSPO step ran on the one group; it updated only if the group's rewards differed.
    const steps = readFileSync(join(work, "steps.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, number>);
    expect(steps).toHaveLength(1);
    expect(summary.updates).toBe(steps.filter((s) => s["batch/groups_trained"]).length);
    if (summary.updates === 0) expect(summary.min_pearson).toBeNull();

    // Every process that ran sandboxes (both evaluations and the rollout worker) left none behind.
    const record = JSON.parse(readFileSync(join(work, "run.json"), "utf8")) as { processes: number[]; harness: string; held_out: boolean; warm_start: boolean };
    expect(record).toMatchObject({ harness: "codex", held_out: true, warm_start: false });
    expect(record.processes).toHaveLength(3);
    for (const pid of record.processes) {
      expect(await containersOfProcess(pid)).toEqual([]);
    }

    // The report says which harness, and says so when no update ran.
    const report = readFileSync(join(work, "report.md"), "utf8");
    expect(report).toContain("| harness | codex |");
    expect(report).toContain("before (as initialised)");
    if (summary.updates === 0) expect(report).toContain("No GSPO step updated the weights");
    for (const png of ["reward.png", "correlation.png", "k3-kl.png", "turns.png", "eval.png"]) expect(existsSync(join(work, png))).toBe(true);
  });

  it("refuses an unknown harness, naming the ones there are, before anything runs", () => {
    const run = spawnSync(LEGO, ["demo", "--harness", "nope", "--work-dir", work], { cwd: REPO_ROOT, encoding: "utf8", timeout: 60_000 });
    expect(run.status).not.toBe(0);
    expect(run.stderr).toMatch(/--harness nope: unknown harness \(known: reference, claude-code, opencode, codex, openhands, mini-swe-agent\)/);
  });

  it("refuses a warm-start stopping probability outside [0, 1] before anything runs", () => {
    const run = spawnSync(LEGO, ["demo", "--sft-stop-at", "1.5", "--no-ui", "--work-dir", work], { cwd: REPO_ROOT, encoding: "utf8", timeout: 60_000 });
    expect(run.status).not.toBe(0);
    expect(run.stderr).toMatch(/--sft-stop-at must be a probability in \[0, 1\] \(0: off\), got 1\.5/);
  });

  it("refuses a task source it cannot open, naming the flag", () => {
    const run = spawnSync(LEGO, ["demo", "--tasks", "/no/such/tasks", "--sft-steps", "0", "--no-ui", "--work-dir", work], { cwd: REPO_ROOT, encoding: "utf8", timeout: 120_000 });
    expect(run.status).not.toBe(0);
    expect(run.stderr).toMatch(/--tasks \/no\/such\/tasks: /);
  });
});
