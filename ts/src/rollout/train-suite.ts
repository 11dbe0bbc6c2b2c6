/**
 * End to end from a real harness to a GSPO step, one suite for every harness
 * (claude-code-train.e2e.test.ts, reference-train.e2e.test.ts): the worker
 * loop (runWorkerLoop, the real Sender) → the real harness in real sandboxes
 * → the proxy → scripted engines → the data plane → `python -m lego_rl.trainer
 * --receive` (the Python receiver and a GSPO step per batch on a tiny MoE with
 * the Qwen3 vocabulary, the tokens the scripted engines speak).
 *
 * In each group of two, rollout r0's engine replays the gold solution
 * (reward 1) and r1's answers at once (reward 0), so every group has reward
 * spread and every batch trains (GSPO skips a group of equal rewards; coin
 * tasks left that to chance). What the receiver holds is checked against what
 * each engine returned, token for token: each turn's prompt is its segment's
 * prefix and its completion the span's tokens with the engine's logprobs; the
 * loss mask is exactly the sampled tokens; the provenance (harness, task,
 * group, trajectory, producer, each turn's policy version) is the run's.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PYTHON } from "../json-line-process.ts";
import { REPO_ROOT } from "../repo-root.ts";
import { ensureBaseImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import { defaultTasksConfig, openTaskSource } from "../tasks/index.ts";
import { Sender } from "../transport/index.ts";
import { RolloutEvents, RolloutRunner, runWorkerLoop } from "./index.ts";
import { scriptedLauncher, type EngineCall } from "./test-engines.ts";
import { receivedTrajectories, startTrainer, type ReceivedSegment } from "./test-support.ts";

const G = 2;
const GROUPS = 2;
const RUN = "train";

/**
 * The received segments, in order, are the engine's calls, in order: each
 * span's prompt is the segment's prefix, its completion the engine's tokens
 * and logprobs (stored as float32), its policy version the engine's (0: the
 * trainer's first weights). The loss mask is 1 on those completions, 0 elsewhere.
 */
function expectSegmentsAreEngineCalls(segments: ReceivedSegment[], calls: EngineCall[]): void {
  const spans = segments.flatMap((s) => s.turns.map((t) => ({ s, t })));
  expect(spans).toHaveLength(calls.length);
  spans.forEach(({ s, t }, i) => {
    const call = calls[i]!;
    expect(s.token_ids.slice(0, t.completion_start), `turn ${i}: prompt`).toEqual(call.prompt);
    expect(s.token_ids.slice(t.completion_start, t.completion_end), `turn ${i}: completion`).toEqual(call.completion);
    expect(s.logprobs.slice(t.completion_start, t.completion_end), `turn ${i}: logprobs`).toEqual(call.logprobs.map(Math.fround));
    expect(t.policy_version).toBe(0);
  });
  for (const s of segments) {
    const mask = new Array<number>(s.token_ids.length).fill(0);
    for (const t of s.turns) mask.fill(1, t.completion_start, t.completion_end);
    expect(s.loss_mask).toEqual(mask);
  }
}

export interface TrainSuiteOptions {
  /** The real harness (a key of HARNESS_TOOLS). */
  harness: string;
  maxTurns: number;
  /** The agent stage's wall-clock limit. */
  timeoutSec: number;
  /** A file the harness needs from scripts/setup (its runtime binary): missing fails, never skips. */
  requires?: string;
}

export function trainSuite(opts: TrainSuiteOptions): void {
  const work = mkdtempSync(join(tmpdir(), `lego-rollout-${opts.harness}-train-`));
  const name = `${opts.harness}/gold-or-answer`;
  const producer = `${opts.harness}-train`;

  describe(`${opts.harness} → worker → receiver → GSPO trainer`, () => {
    let trainer: Awaited<ReturnType<typeof startTrainer>> | undefined;
    beforeAll(async () => {
      if (opts.requires) expect(existsSync(opts.requires), `no ${opts.requires}: run scripts/setup`).toBe(true);
      await ensureBaseImage();
      const model = join(work, "tiny-qwen3");
      const w = spawnSync(PYTHON, ["-c", "import sys; from lego_rl.model.tiny import write_tiny_model; write_tiny_model(sys.argv[1], tokenizer='qwen3', seed=0)", model], { cwd: REPO_ROOT, encoding: "utf8", timeout: 180_000 });
      expect(w.status, w.stderr).toBe(0);
      trainer = await startTrainer({ model, work, maxSteps: GROUPS });
    }, IMAGE_BUILD_TIMEOUT_MS);
    afterAll(async () => {
      if (trainer && trainer.proc.exitCode === null) trainer.proc.kill("SIGKILL");
      expect(await leftoverContainers()).toEqual([]);
      rmSync(work, { recursive: true, force: true });
    });

    it("ships each group once, token for token as its engines answered, with its provenance, and trains a GSPO step on each", { timeout: 900_000 }, async () => {
      const launcher = scriptedLauncher({
        harness: opts.harness, name, limits: { maxTurns: opts.maxTurns, timeoutSec: opts.timeoutSec },
        // Attempt ids are TRAJECTORY.ATTEMPT: r0 replays the gold solution, r1 answers at once.
        engineFor: (id) => (/\.r0\.\d+$/.test(id) ? "scripted-gold" : "answer-at-once"),
      });
      const tasks = (await openTaskSource("easy:seed=11,count=2", defaultTasksConfig())).tasks;
      const runner = await RolloutRunner.create({ ...launcher.runner, concurrency: G, maxAttempts: 1 });
      const sender = new Sender({ address: trainer!.address, spoolDir: join(work, "tx"), producerId: producer });
      let result;
      try {
        result = await runWorkerLoop(tasks, { runner, launcher, sink: sender, events: new RolloutEvents() }, {
          groupSize: G, concurrency: G, maxAttempts: 1, runId: RUN, routing: null, staleness: { maxStaleness: null },
        });
        await sender.drain(120_000);
      } finally {
        await runner.close();
        await sender.close();
      }
      expect(result).toEqual({ groupsShipped: GROUPS, groupsShippedBefore: 0, trajectoriesShipped: GROUPS * G, droppedEnvErrors: 0 });
      const proc = trainer!.proc;
      const exit = await Promise.race([
        new Promise<number | null>((res) => (proc.exitCode !== null ? res(proc.exitCode) : proc.once("exit", res))),
        new Promise<never>((_, rej) => setTimeout(() => rej(new Error(`the trainer did not finish its ${GROUPS} steps in 300 s: ${trainer!.stderr().slice(-3000)}`)), 300_000)),
      ]);
      expect(exit, trainer!.stderr().slice(-3000)).toBe(0);

      // Every rollout once, under the ids, group, task, harness and producer the run gave it.
      const received = receivedTrajectories(trainer!.rxSpool);
      const groupIds = tasks.map((t, g) => `${RUN}-g${g}-${t.id.replace(/[^A-Za-z0-9_.-]+/g, "_")}`);
      expect(received.map((t) => t.trajectory_id).sort()).toEqual(groupIds.flatMap((g) => [`${g}.r0`, `${g}.r1`]).sort());
      for (const t of received) {
        const g = groupIds.findIndex((id) => t.trajectory_id.startsWith(`${id}.`));
        const gold = t.trajectory_id.endsWith(".r0");
        expect(t).toMatchObject({
          producer_id: producer, harness: name, group_id: groupIds[g], task_id: tasks[g]!.id,
          status: "ok", reward: gold ? 1 : 0, attempt: 0, error: null, metrics: { side_thread_turns: 0 },
        });
        // The gold script takes several turns; answering at once is one.
        expect(t.metrics.turns).toBe(gold ? t.segments.flatMap((s) => s.turns).length : 1);
        expectSegmentsAreEngineCalls(t.segments, launcher.calls.get(`${t.trajectory_id}.1`)!);
      }

      // One step per batch (a group), each over its two trajectories and exactly the tokens the
      // receiver holds for them (every token read, the loss-masked ones trained), and every one
      // trained: the policy version moved once per step.
      const steps = readFileSync(trainer!.stepLog, "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, number | string>);
      expect(steps.map((s) => s.batch_id).sort()).toEqual([...new Set(received.map((t) => t.batch_id))].sort());
      const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
      for (const s of steps) {
        const segments = received.filter((t) => t.batch_id === s.batch_id).flatMap((t) => t.segments);
        expect(s).toMatchObject({
          "batch/groups_trained": 1, "batch/groups_skipped_identical": 0, "batch/trajectories": G, "rollout/reward_mean": 0.5,
          "batch/tokens": sum(segments.map((x) => x.token_ids.length)), "batch/trainable_tokens": sum(segments.map((x) => sum(x.loss_mask))),
        });
        expect(Number.isFinite(s["loss/total"])).toBe(true);
      }
      expect(steps.map((s) => s.policy_version)).toEqual([1, 2]);
    });
  });
}
