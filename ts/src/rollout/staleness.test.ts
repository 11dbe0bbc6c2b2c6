import { describe, expect, it } from "vitest";
import type { Trajectory } from "../schema/index.ts";
import { synthetic } from "../schema/index.ts";
import { mayStartRollout, overStalenessBound, policyVersionRange } from "./index.ts";

const turn = (id: string, v: number) => ({ turn_id: id, prompt: 3, completion: 2, tail: 1, policy_version: v, finish_reason: "stop" as const });
const traj = (versions: number[]): Trajectory => ({
  trajectory_id: "t", group_id: "g", task_id: "x", harness: "oracle", status: "ok", reward: 1, attempt: 0, defense_flags: [], error: null,
  metrics: { turns: versions.length, tool_calls: 0, rereads_after_edit: 0, side_thread_turns: 0, rolled_back_turns: 0, wall_time_s: 1 },
  segments: versions.length ? [synthetic.buildSegment({ segment_id: "s", thread: "main", thread_id: "m", seal_reason: "finished", seed: 1, turns: versions.map((v, i) => turn(`t${i}`, v)) }, null)] : [],
});

describe("staleness rule", () => {
  it("pauses starts once the trainer is more than K versions ahead, resumes when the engine catches up", () => {
    const bound = { maxStaleness: 2 };
    expect(mayStartRollout(bound, 5, 7)).toBe(true);
    expect(mayStartRollout(bound, 5, 8)).toBe(false);
    expect(mayStartRollout(bound, 6, 8)).toBe(true);
    expect(mayStartRollout(bound, 0, null)).toBe(true);
    expect(mayStartRollout({ maxStaleness: null }, 0, 100)).toBe(true);
  });

  it("judges a rollout by its oldest turn", () => {
    expect(policyVersionRange(traj([4, 6, 5]).segments)).toEqual({ min: 4, max: 6 });
    expect(policyVersionRange(traj([]).segments)).toBeNull();
    expect(overStalenessBound({ maxStaleness: 2 }, 4, 6)).toBe(false);
    expect(overStalenessBound({ maxStaleness: 2 }, 4, 7)).toBe(true);
    expect(overStalenessBound({ maxStaleness: 2 }, null, 100)).toBe(false);
    expect(overStalenessBound({ maxStaleness: 0 }, 4, null)).toBe(false);
    expect(overStalenessBound({ maxStaleness: null }, 0, 100)).toBe(false);
  });
});
