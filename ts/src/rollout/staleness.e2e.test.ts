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
import { JsonLineProcess, PYTHON } from "../json-line-process.ts";
import { RolloutEvents, RolloutRunner, runWorkerLoop, type RolloutEvent } from "./index.ts";

/** The real receiver with version 3 published before any sender connects (announced on hello). */
const TRAINER = `
import json, signal, sys, time
from pathlib import Path
from lego_rl.schema import WeightVersion
from lego_rl.transport.receiver import Receiver, ReceiverConfig
out = lambda e: (sys.stdout.write(json.dumps(e) + "\\n"), sys.stdout.flush())
rx = Receiver(ReceiverConfig(bind="tcp://127.0.0.1:*", spool_dir=Path(sys.argv[1]), on_event=out))
rx.publish_weight_version(WeightVersion(version=3, published_at_ms=int(time.time() * 1000), checkpoint_path=None))
out({"type": "listening", "address": rx.address})
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
while not stop:
    b = rx.receive(timeout_s=0.2)
    if b is not None:
        rx.commit(b)
rx.close()
`;

const work = mkdtempSync(join(tmpdir(), "lego-rollout-stale-"));

describe("staleness pause", () => {
  let trainer: JsonLineProcess;
  let address: string;
  beforeAll(async () => {
    await ensureBaseImage();
    trainer = new JsonLineProcess("trainer", PYTHON, ["-c", TRAINER, join(work, "rx")]);
    address = (await trainer.waitFor((e) => e.type === "listening", 30_000)).address as string;
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
