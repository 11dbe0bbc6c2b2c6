/**
 * Ship-time staleness over a group: every rollout of the group is judged against the one
 * trainer version known as it ships, the verdict is on the record itself (`stale`, with the
 * versions it was judged from), and the summary shows what shipped: stale ones, the policy
 * versions, tokens and tool-call parse failures.
 */
import { describe, expect, it } from "vitest";
import { synthetic } from "../schema/index.ts";
import type { RolloutOutcome } from "../sandbox/index.ts";
import { RolloutEvents, SummaryCollector, buildTrajectory, formatSummary } from "./index.ts";

const turn = (id: string, v: number) => ({ turn_id: id, prompt: 3, completion: 2, tail: 1, policy_version: v, finish_reason: "stop" as const });
const segment = (versions: number[]) =>
  synthetic.buildSegment({ segment_id: "s", thread: "main", thread_id: "m", seal_reason: "finished", seed: 1, turns: versions.map((v, i) => turn(`t${i}`, v)) }, null);
const outcome: RolloutOutcome = { status: "ok", reward: 1, defenseFlags: [], attempts: 1, timingsMs: { setup: 1000, agent: 2000, grading: 500 }, log: "" };

describe("staleness at ship time", () => {
  const group = { fresh: [5, 6], spans: [3, 6], old: [1], "no-turns": [] } as Record<string, number[]>;
  const ship = (trainerVersion: number | null) =>
    Object.entries(group).map(([id, versions]) => buildTrajectory({
      identity: { trajectoryId: id, groupId: "g", taskId: "x", harness: "reference" },
      session: { segments: versions.length ? [segment(versions)] : [], toolCalls: versions.length, toolCallParseFailures: 1, rereadsAfterEdit: 0, rolledBackTurns: 0 },
      outcome, wallTimeS: 1, routing: null, ship: { staleness: { maxStaleness: 2 }, trainerVersion, length: null },
    }));

  it("flags on the record exactly the rollouts whose oldest turn is over the bound, with what it was judged from", () => {
    expect(ship(6).map((t) => [t.trajectory_id, t.stale, t.min_policy_version, t.max_policy_version, t.trainer_version_at_ship])).toEqual([
      ["fresh", false, 5, 6, 6], ["spans", true, 3, 6, 6], ["old", true, 1, 1, 6], ["no-turns", false, null, null, 6],
    ]);
    expect(ship(5).filter((t) => t.stale).map((t) => t.trajectory_id)).toEqual(["old"]);
    expect(ship(null).some((t) => t.stale)).toBe(false);
  });

  it("the summary counts stale records and shows versions, tokens and parse failures", () => {
    const events = new RolloutEvents();
    const summary = new SummaryCollector(events);
    for (const t of ship(6).filter((x) => x.stale)) {
      events.emit({ kind: "over_staleness_bound", groupId: "g", trajectoryId: t.trajectory_id, oldestVersion: t.min_policy_version!, trainerVersion: 6, maxStaleness: 2 });
    }
    events.emit({
      kind: "group_shipped", groupId: "g", taskId: "x", trajectories: 4, droppedEnvErrors: 0, stale: 2, policyVersions: { min: 1, max: 6 },
      tokens: { prompt: 20, completion: 10, trainable: 10 }, toolCalls: 5, toolCallParseFailures: 4,
    });
    const s = summary.summary();
    expect(s).toMatchObject({ overStalenessBound: 2, policyVersions: { min: 1, max: 6 }, tokens: { prompt: 20, completion: 10, trainable: 10 }, toolCallParseFailures: 4, toolCallParseFailureRate: 0.444 });
    expect(formatSummary(s)).toMatch(/tokens: 20 prompt, 10 completion, 10 trainable; tool-call parse failures 4 \(rate 0\.444\)/);
    expect(formatSummary(s)).toMatch(/policy versions 1\.\.6; 2 shipped stale \(over --max-staleness\); paused for staleness 0 time\(s\)/);
  });
});
