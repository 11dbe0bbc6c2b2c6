/**
 * End to end with Claude Code and a trainer, real processes throughout:
 * `lego rollout --harness claude-code --engine answer-at-once` → the real
 * `claude` binary from the mounted runtime in real sandboxes → the proxy →
 * the scripted engine → the data plane → `python -m lego_rl.trainer
 * --receive` (the Python receiver and a GSPO step per batch on a tiny MoE with
 * the Qwen3 vocabulary, the tokens the scripted engine speaks).
 *
 * The tasks are "coin" tasks (as in tests/test_the_loop_smoke.py): the
 * verifier passes at random, so a group usually carries reward variance and
 * the step has an advantage to train on (with G=4 a group has identical
 * rewards, and is skipped by GSPO, with probability 1/8; the checks that need
 * a trained group say so and hold whenever one was).
 */
import { execFile, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RUNTIMES_DIR } from "../harness/index.ts";
import { PYTHON } from "../json-line-process.ts";
import { REPO_ROOT } from "../repo-root.ts";
import { ensureBaseImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import { receivedRows } from "./test-support.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const work = mkdtempSync(join(tmpdir(), "lego-rollout-cc-train-"));
const G = 4;
const GROUPS = 2;

function coinTasks(root: string): string {
  for (const name of ["coin-a", "coin-b"]) {
    const d = join(root, name);
    mkdirSync(join(d, "environment"), { recursive: true });
    mkdirSync(join(d, "tests"));
    writeFileSync(join(d, "task.toml"), `version = "1.0"\n\n[metadata]\nname = "${name}"\n\n[agent]\ntimeout_sec = 300\n\n[verifier]\ntimeout_sec = 60\n`);
    writeFileSync(join(d, "instruction.md"), "Make main.py print the sum of 2 and 3.\n");
    writeFileSync(join(d, "environment/setup.sh"), "#!/bin/bash\nset -euo pipefail\necho 'print(\"hello\")' > /workspace/main.py\nchown -R 1000:1000 /workspace\n");
    writeFileSync(join(d, "tests/test.sh"), "#!/bin/bash\ncd /workspace\npython3 -I -m pytest -p no:cacheprovider -o addopts= -q -c /tests/pytest.ini --rootdir=/workspace /tests/test_coin.py\n");
    // Passes at random: reward variance a policy that only answers can still get (module doc).
    writeFileSync(join(d, "tests/test_coin.py"), "import os\n\n\ndef test_coin():\n    assert os.urandom(1)[0] % 2 == 0\n");
    writeFileSync(join(d, "tests/pytest.ini"), "[pytest]\n");
  }
  return root;
}

/** Starts the single-process GSPO trainer with its receiver; resolves with the address it receives on. */
async function startTrainer(model: string): Promise<{ proc: ChildProcess; address: string; stderr: () => string }> {
  const proc = spawn(PYTHON, [
    "-m", "lego_rl.trainer", "--model", model, "--checkpoints", join(work, "ckpt"), "--receive", "tcp://127.0.0.1:*",
    "--receiver-spool", join(work, "rx"), "--max-steps", String(GROUPS), "--log", join(work, "steps.jsonl"), "--threads", "1",
  ], { cwd: REPO_ROOT, stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  const address = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`the trainer did not say where it receives within 180 s: ${err.slice(-2000)}`)), 180_000);
    createInterface({ input: proc.stderr! }).on("line", (l) => {
      err += `${l}\n`;
      const m = /^trainer: receiving on (\S+)/.exec(l);
      if (m) {
        clearTimeout(timer);
        res(m[1]!);
      }
    });
    proc.on("exit", (code) => {
      clearTimeout(timer);
      rej(new Error(`the trainer exited (${code}) before receiving: ${err.slice(-2000)}`));
    });
  });
  return { proc, address, stderr: () => err };
}

describe("lego rollout with Claude Code into a GSPO trainer", () => {
  let trainer: Awaited<ReturnType<typeof startTrainer>> | undefined;
  let model: string;
  beforeAll(async () => {
    // scripts/setup builds the runtimes; a missing one fails here, never skips.
    expect(existsSync(join(RUNTIMES_DIR, "harness/node_modules/@anthropic-ai/claude-code-linux-x64/claude")), `no Claude Code runtime in ${RUNTIMES_DIR}: run scripts/setup`).toBe(true);
    await ensureBaseImage();
    model = join(work, "tiny-qwen3");
    const w = spawnSync(PYTHON, ["-c", "import sys; from lego_rl.model.tiny import write_tiny_model; write_tiny_model(sys.argv[1], tokenizer='qwen3', seed=0)", model], { cwd: REPO_ROOT, encoding: "utf8", timeout: 180_000 });
    expect(w.status, w.stderr).toBe(0);
    trainer = await startTrainer(model);
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    if (trainer && trainer.proc.exitCode === null) trainer.proc.kill("SIGTERM");
    expect(await leftoverContainers()).toEqual([]);
    rmSync(work, { recursive: true, force: true });
  });

  it("ships every Claude Code group once, with its segments, and the trainer runs a GSPO step on each", { timeout: 1_200_000 }, async () => {
    const { stdout } = await promisify(execFile)(LEGO, [
      "rollout", "--tasks", coinTasks(join(work, "tasks")), "--harness", "claude-code", "--engine", "answer-at-once", "--max-turns", "4",
      "--group-size", String(G), "--concurrency", String(G), "--trainer", trainer!.address, "--spool-dir", join(work, "tx"), "--producer-id", "cc-train",
    ], { timeout: 1_000_000, maxBuffer: 1 << 24 });
    const lines = stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    const summary = lines.at(-1)!;
    expect(summary).toMatchObject({ event: "summary", groupsShipped: GROUPS, trajectoriesShipped: GROUPS * G, droppedEnvErrors: 0, statuses: { ok: GROUPS * G } });
    expect(Object.keys(summary.rewardByHarness as object)).toEqual(["claude-code/answer-at-once"]);

    const exit = await new Promise<number | null>((res) => (trainer!.proc.exitCode !== null ? res(trainer!.proc.exitCode) : trainer!.proc.on("exit", res)));
    expect(exit, trainer!.stderr().slice(-3000)).toBe(0);
    const rows = receivedRows(join(work, "rx"));
    expect(rows).toHaveLength(GROUPS * G);
    expect(new Set(rows.map((r) => r.trajectory_id)).size).toBe(GROUPS * G);
    expect(rows.every((r) => r.harness === "claude-code/answer-at-once" && r.status === "ok" && (r.reward === 0 || r.reward === 1))).toBe(true);
    const groups = new Map<string, number>();
    for (const r of rows) groups.set(r.group_id as string, (groups.get(r.group_id as string) ?? 0) + 1);
    expect([...groups.values()]).toEqual([G, G]);

    // One step per shipped batch (a group), each over exactly one group of G Claude Code trajectories.
    const steps = readFileSync(join(work, "steps.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, number>);
    expect(steps).toHaveLength(GROUPS);
    const accepted = readFileSync(join(work, "rx", "accepted.log"), "utf8").split(/\s+/).filter(Boolean).sort();
    expect(steps.map((s) => s.batch_id as unknown as string).sort()).toEqual(accepted);
    for (const s of steps) expect(s["batch/groups_trained"]! + s["batch/groups_skipped_identical"]!).toBe(1);
    const trained = steps.filter((x) => x["batch/groups_trained"]);
    // A trained group is an update over Claude Code's sampled tokens: a finite loss, and a new policy version.
    for (const s of trained) expect(Number.isFinite(s["loss/total"])).toBe(true);
    expect(steps.at(-1)!.policy_version).toBe(trained.length);
    process.stderr.write(`claude-code-train: ${trained.length} of ${GROUPS} steps trained a group\n`);
  });
});
