/**
 * Ship-time staleness flagging in a real worker run (real sandboxes, Sender and
 * Python receiver, trainer at version 3, bound 1): the oracle's rollouts carry
 * session records whose turns were sampled with version 0 (r0, over the bound)
 * or 2 (r1, within it). Every trajectory ships (nothing is cut), and exactly
 * the over-bound ones are flagged: `stale` on the record the receiver holds,
 * an over_staleness_bound event, the summary's count.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { synthetic } from "../schema/index.ts";
import { ensureBaseImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import { defaultTasksConfig, openTaskSource, oracleAgent, type AgentLauncher } from "../tasks/index.ts";
import { Sender } from "../transport/index.ts";
import type { JsonLineProcess } from "../transport/bench-peers.ts";
import { RolloutEvents, RolloutRunner, SummaryCollector, runWorkerLoop, type RolloutEvent } from "./index.ts";
import { receivedRows, startVersionedTrainer } from "./test-support.ts";

const work = mkdtempSync(join(tmpdir(), "lego-rollout-stale-ship-"));

/** The oracle, with each rollout's session records stamped as if an engine at that version served its turns. */
const versionedOracle: AgentLauncher = {
  name: "oracle",
  async start(task, def, rolloutId) {
    const agent = await oracleAgent.start(task, def, rolloutId);
    const version = /\.r0\.\d+$/.test(rolloutId) ? 0 : 2;
    const turns = [0, 1].map((i) => ({ turn_id: `${rolloutId}-t${i}`, prompt: 3, completion: 2, tail: 1, policy_version: version, finish_reason: "stop" as const }));
    const segment = synthetic.buildSegment({ segment_id: `${rolloutId}-s`, thread: "main", thread_id: "m", seal_reason: "finished", seed: 1, turns }, null);
    return { ...agent, session: () => ({ segments: [segment], toolCalls: 0, toolCallParseFailures: 0, rereadsAfterEdit: 0, rolledBackTurns: 0 }) };
  },
  samplingVersion: () => 2,
};

describe("staleness at ship time, end to end", () => {
  let trainer: JsonLineProcess;
  let address: string;
  beforeAll(async () => {
    await ensureBaseImage();
    ({ receiver: trainer, address } = await startVersionedTrainer(join(work, "rx"), 3));
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    trainer?.stop();
    expect(await leftoverContainers()).toEqual([]);
    rmSync(work, { recursive: true, force: true });
  });

  it("ships every trajectory and flags exactly those with a turn over the bound", { timeout: 300_000 }, async () => {
    const tasks = (await openTaskSource("easy:seed=7,count=2", defaultTasksConfig())).tasks;
    const sender = new Sender({ address, spoolDir: join(work, "tx"), producerId: "stale-ship" });
    const runner = new RolloutRunner({ concurrency: 2, maxAttempts: 1 });
    const events = new RolloutEvents();
    const seen: RolloutEvent[] = [];
    events.subscribe((e) => seen.push(e));
    const summary = new SummaryCollector(events);
    try {
      expect((await sender.waitForPolicyVersion(3, 30_000)).version).toBe(3);
      await runWorkerLoop(tasks, { runner, launcher: versionedOracle, sink: sender, events }, {
        groupSize: 2, concurrency: 2, maxAttempts: 1, runId: "staleship", routing: null, staleness: { maxStaleness: 1 }, samplingVersion: () => 2,
      });
      await sender.drain(60_000);
    } finally {
      await runner.close();
      await sender.close();
    }
    const flagged = seen.flatMap((e) => (e.kind === "over_staleness_bound" ? [e] : []));
    expect(flagged.map((e) => e.trajectoryId).sort()).toEqual(seen.flatMap((e) => (e.kind === "rollout_finished" && /\.r0$/.test(e.trajectoryId) ? [e.trajectoryId] : [])).sort());
    expect(flagged).toHaveLength(2);
    for (const f of flagged) expect(f).toMatchObject({ oldestVersion: 0, trainerVersion: 3, maxStaleness: 1 });
    expect(summary.summary()).toMatchObject({ overStalenessBound: 2, trajectoriesShipped: 4, pausedForStaleness: 0 });
    const rows = receivedRows(join(work, "rx"));
    expect(rows).toHaveLength(4);
    // The flag is on the record the trainer reads, with the versions it was judged from.
    for (const r of rows) {
      const old = /\.r0$/.test(r.trajectory_id as string);
      expect(r).toMatchObject({ stale: old, min_policy_version: old ? 0 : 2, trainer_version_at_ship: 3 });
    }
  });
});
