/**
 * The staleness pause against the real Python receiver: the trainer has
 * published version 3, the engine samples with version 0 and the bound is 1,
 * so the worker holds its group back; once the engine's weights reach 2 it
 * resumes and the group ships.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureBaseImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import { defaultTasksConfig, openTaskSource, oracleAgent } from "../tasks/index.ts";
import { Sender } from "../transport/index.ts";
import type { JsonLineProcess } from "../json-line-process.ts";
import { RolloutEvents, RolloutRunner, runWorkerLoop, type RolloutEvent } from "./index.ts";
import { startVersionedTrainer } from "./test-support.ts";

const work = mkdtempSync(join(tmpdir(), "lego-rollout-stale-"));

describe("staleness pause", () => {
  let trainer: JsonLineProcess;
  let address: string;
  beforeAll(async () => {
    await ensureBaseImage();
    // The real receiver with version 3 published before any sender connects.
    ({ receiver: trainer, address } = await startVersionedTrainer(join(work, "rx"), 3));
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    trainer?.stop();
    expect(await leftoverContainers()).toEqual([]);
    rmSync(work, { recursive: true, force: true });
  });

  it("pauses new groups while the trainer is more than --max-staleness ahead and resumes once the weights catch up", { timeout: 300_000 }, async () => {
    const tasks = (await openTaskSource("easy:seed=7,count=1", defaultTasksConfig())).tasks;
    const sender = new Sender({ address, spoolDir: join(work, "tx"), producerId: "stale" });
    const runner = new RolloutRunner({ concurrency: 1, maxAttempts: 1 });
    const events = new RolloutEvents();
    const seen: RolloutEvent[] = [];
    let sampling = 0;
    // The engine loads newer weights only once the worker has paused, so the pause is certain to be seen.
    events.subscribe((e) => {
      seen.push(e);
      if (e.kind === "paused_for_staleness") sampling = 2;
    });
    try {
      expect((await sender.waitForPolicyVersion(3, 30_000)).version).toBe(3);
      await runWorkerLoop(tasks, { runner, launcher: oracleAgent, sink: sender, events }, {
        groupSize: 1, concurrency: 1, maxAttempts: 1, runId: "stale", routing: null, staleness: { maxStaleness: 1 }, samplingVersion: () => sampling,
      });
      await sender.drain(60_000);
    } finally {
      await runner.close();
      await sender.close();
    }
    expect(seen.map((e) => e.kind)).toEqual(["paused_for_staleness", "resumed", "rollout_started", "rollout_finished", "group_shipped"]);
    expect(seen[0]).toMatchObject({ policyVersion: 0, trainerVersion: 3, maxStaleness: 1 });
    expect(seen[1]).toMatchObject({ policyVersion: 2, trainerVersion: 3 });
    await trainer.waitFor((e) => e.type === "accepted", 30_000);
  });
});
