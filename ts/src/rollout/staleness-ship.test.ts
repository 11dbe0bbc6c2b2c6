/**
 * Ship-time staleness flagging: a group's trajectories with a turn sampled more than the bound
 * behind the trainer's newest version are reported (never silently shipped), and the worker's
 * event stream and summary carry each of them.
 */
import { describe, expect, it } from "vitest";
import type { Trajectory } from "../schema/index.ts";
import { synthetic } from "../schema/index.ts";
import { RolloutEvents, SummaryCollector, staleAtShip } from "./index.ts";

const turn = (id: string, v: number) => ({ turn_id: id, prompt: 3, completion: 2, tail: 1, policy_version: v, finish_reason: "stop" as const });
const traj = (id: string, versions: number[]): Trajectory => ({
  trajectory_id: id, group_id: "g", task_id: "x", harness: "reference", status: "ok", reward: 1, attempt: 0, defense_flags: [], error: null,
  metrics: { turns: versions.length, tool_calls: 0, rereads_after_edit: 0, side_thread_turns: 0, rolled_back_turns: 0, wall_time_s: 1 },
  segments: versions.length ? [synthetic.buildSegment({ segment_id: "s", thread: "main", thread_id: "m", seal_reason: "finished", seed: 1, turns: versions.map((v, i) => turn(`t${i}`, v)) }, null)] : [],
});

describe("staleness at ship time", () => {
  const group = [traj("fresh", [5, 6]), traj("spans", [3, 6]), traj("old", [1]), traj("no-turns", [])];

  it("reports each trajectory whose oldest turn is over the bound, with the versions", () => {
    expect(staleAtShip({ maxStaleness: 2 }, group, 6)).toEqual([
      { trajectoryId: "spans", oldestVersion: 3, trainerVersion: 6 },
      { trajectoryId: "old", oldestVersion: 1, trainerVersion: 6 },
    ]);
    expect(staleAtShip({ maxStaleness: 2 }, group, 5)).toEqual([{ trajectoryId: "old", oldestVersion: 1, trainerVersion: 5 }]);
  });

  it("flags nothing without a bound or before the trainer announced a version", () => {
    expect(staleAtShip({ maxStaleness: null }, group, 100)).toEqual([]);
    expect(staleAtShip({ maxStaleness: 0 }, group, null)).toEqual([]);
  });

  it("counts over-bound events in the summary", () => {
    const events = new RolloutEvents();
    const summary = new SummaryCollector(events);
    for (const s of staleAtShip({ maxStaleness: 2 }, group, 6)) events.emit({ kind: "over_staleness_bound", groupId: "g", ...s, maxStaleness: 2 });
    expect(summary.summary().overStalenessBound).toBe(2);
  });
});
