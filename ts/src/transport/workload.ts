/**
 * Synthetic trajectories for tests, fixtures and the benchmark, built with the
 * seeded synthetic builders (schema/synthetic.ts) so every value follows the
 * formulas both languages share. Token arrays may be shared between rows:
 * only the ids differ, which keeps large benchmark sets cheap to build.
 */
import type { RoutingShape, Trajectory } from "../schema/index.ts";
import { synthetic } from "../schema/index.ts";

type TrajectorySpec = synthetic.TrajectorySpec;

/** One trajectory of `tokens` tokens in one main-thread segment of `turns` turns. */
export function syntheticTrajectory(id: string, tokens: number, routing: RoutingShape | null, turns = 4, seed = 1): Trajectory {
  const perTurn = Math.max(3, Math.floor(tokens / turns));
  const spec = {
    trajectory_id: id, group_id: `group-${id}`, task_id: "task-synthetic", harness: "reference", status: "ok", reward: 1,
    attempt: 0, defense_flags: [], error: null,
    metrics: { turns, tool_calls: turns - 1, rereads_after_edit: 0, side_thread_turns: 0, rolled_back_turns: 0, wall_time_s: 1.5 },
    segments: [{
      segment_id: `${id}-seg-0`, thread: "main", thread_id: "main", seal_reason: "finished", seed,
      turns: Array.from({ length: turns }, (_, i) => {
        const rest = i === turns - 1 ? Math.max(3, tokens - perTurn * (turns - 1)) : perTurn;
        const completion = Math.max(1, Math.floor(rest / 4));
        return { turn_id: `${id}-turn-${i}`, prompt: rest - completion - 1, completion, tail: 1, policy_version: 1, finish_reason: "stop" };
      }),
    }],
  } as unknown as TrajectorySpec;
  return synthetic.buildTrajectory(spec, routing);
}

/** `count` rows sharing the token arrays of one template, each with its own ids. */
export function replicate(template: Trajectory, count: number, idPrefix: string): Trajectory[] {
  return Array.from({ length: count }, (_, i) => {
    const id = `${idPrefix}-${i}`;
    return { ...template, trajectory_id: id, group_id: `group-${Math.floor(i / 8)}`, segments: template.segments.map((s, j) => ({ ...s, segment_id: `${id}-seg-${j}` })) };
  });
}
