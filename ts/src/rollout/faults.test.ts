/**
 * Faults during a worker run of 4 groups, against real Docker, the real
 * Sender and the real Python receiver: an agent container that dies under a
 * rollout is env_error, retried with a fresh sandbox; one that dies on every
 * attempt is dropped from its group, which ships without it and says so.
 * Every rollout is accounted for exactly once and no container is left.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { AgentSandbox } from "../sandbox/index.ts";
import { leftoverContainers } from "../sandbox/test-support.ts";
import { defaultTasksConfig, openTaskSource, oracleAgent, type Task } from "../tasks/index.ts";
import { Sender } from "../transport/index.ts";
import { RolloutEvents, RolloutRunner, SummaryCollector, runWorkerLoop, type RolloutEvent } from "./index.ts";
import { receivedRows, receiverFixture } from "./test-support.ts";

/** Stops the agent container of every rollout attempt whose id `doomed` picks, before the agent runs. */
class KillingRunner extends RolloutRunner {
  readonly killed: string[] = [];
  constructor(private readonly doomed: (rolloutId: string) => boolean) {
    super({ concurrency: 2, maxAttempts: 1 });
  }
  override async agent(image: string, rolloutId: string): Promise<AgentSandbox> {
    const box = await super.agent(image, rolloutId);
    if (this.doomed(rolloutId)) {
      this.killed.push(rolloutId);
      await box.sandbox.stop(0);
    }
    return box;
  }
}

const work = mkdtempSync(join(tmpdir(), "lego-rollout-faults-"));

describe("worker faults", () => {
  let tasks: Task[];
  const rx = receiverFixture(work, async () => {
    tasks = (await openTaskSource("easy:seed=7,count=4", defaultTasksConfig())).tasks;
  });

  it("retries a container death, drops a rollout that dies on every attempt, and accounts for each once", { timeout: 600_000 }, async () => {
    // Attempt ids are TRAJECTORY.ATTEMPT plus the runner's own .1. g0's first rollout dies once (retried, then ok); g1's second dies on both attempts (dropped).
    const runner = new KillingRunner((id) => /-g0-.*\.r0\.1\.1$/.test(id) || /-g1-.*\.r1\.\d\.1$/.test(id));
    const events = new RolloutEvents();
    const seen: RolloutEvent[] = [];
    events.subscribe((e) => seen.push(e));
    const collector = new SummaryCollector(events);
    const sender = new Sender({ address: rx.address, spoolDir: join(work, "tx"), producerId: "faults" });
    let result;
    try {
      result = await runWorkerLoop(tasks, { runner, launcher: oracleAgent, sink: sender, events }, {
        groupSize: 2, concurrency: 2, maxAttempts: 2, runId: "faults", routing: null, staleness: { maxStaleness: null },
      });
      await sender.drain(120_000);
    } finally {
      await runner.close();
      await sender.close();
    }
    expect(runner.killed).toHaveLength(3);
    expect(result).toEqual({ groupsShipped: 4, groupsShippedBefore: 0, trajectoriesShipped: 7, droppedEnvErrors: 1 });
    const retried = seen.filter((e) => e.kind === "rollout_retried");
    // The message: a retry for anything else (a daemon error under load) says what the daemon answered.
    expect(retried.map((e) => e.kind === "rollout_retried" && e.envError), JSON.stringify(retried)).toEqual(["container_died", "container_died"]);
    for (const e of retried) expect(e.kind === "rollout_retried" && e.error).toMatch(/^container_died: ./);  // says why
    const shipped = seen.filter((e) => e.kind === "group_shipped");
    expect(shipped.find((e) => e.groupId.includes("-g1-"))).toMatchObject({ trajectories: 1, droppedEnvErrors: 1 });
    expect(collector.summary()).toMatchObject({ statuses: { ok: 7, env_error: 1 }, envErrors: { container_died: 3 }, droppedEnvErrors: 1, retries: 2 });

    const rows = receivedRows(join(work, "rx"));
    const ids = rows.map((r) => r.trajectory_id as string).sort();
    // Every rollout exactly once: shipped (7), or dropped with its reason (the one env_error above).
    expect(ids).toEqual([...new Set(ids)]);
    expect(ids).toHaveLength(7);
    expect(rows.every((r) => r.status === "ok" && r.reward === 1)).toBe(true);
    expect(rows.find((r) => /-g0-.*\.r0$/.test(r.trajectory_id as string))).toMatchObject({ attempt: 1 });
    expect(rows.some((r) => /-g1-.*\.r1$/.test(r.trajectory_id as string))).toBe(false);
    expect(await leftoverContainers()).toEqual([]);
  });
});
