import { describe, expect, it } from "vitest";
import { SchemaError, decodeBatch, encodeBatch, type Segment, type Trajectory } from "../schema/index.ts";
import { synthetic } from "../schema/index.ts";
import type { RolloutOutcome } from "../sandbox/index.ts";
import { buildTrajectory, type SessionRecords } from "./index.ts";

const turn = (id: string) => ({ turn_id: id, prompt: 5, completion: 4, tail: 2, policy_version: 3, finish_reason: "stop" as const });
const seg = (id: string, thread: "main" | "side", turns: number): Segment =>
  synthetic.buildSegment({ segment_id: id, thread, thread_id: `${thread}-0`, seal_reason: "finished", seed: id.length, turns: Array.from({ length: turns }, (_, i) => turn(`${id}.${i}`)) }, null);

const session = (segments: Segment[]): SessionRecords => ({ segments, toolCalls: 7, rereadsAfterEdit: 1, rolledBackTurns: 0 });
const outcome = (o: Partial<RolloutOutcome>): RolloutOutcome => ({ status: "ok", reward: 1, defenseFlags: [], attempts: 1, timingsMs: {}, log: "", ...o });
const identity = { trajectoryId: "t1", groupId: "g1", taskId: "task", harness: "oracle" };

describe("buildTrajectory", () => {
  it("puts the main thread first, counts turns per thread and survives an Arrow round trip", () => {
    const t = buildTrajectory({ identity, session: session([seg("side-a", "side", 1), seg("main-a", "main", 2)]), outcome: outcome({ defenseFlags: ["timeout", "network_attempt", "timeout"] }), wallTimeS: 2.5, routing: null });
    expect(t.segments.map((s) => s.thread)).toEqual(["main", "side"]);
    expect(t.metrics).toEqual({ turns: 2, tool_calls: 7, rereads_after_edit: 1, side_thread_turns: 1, rolled_back_turns: 0, wall_time_s: 2.5 });
    expect(t.defense_flags).toEqual(["network_attempt", "timeout"]);
    expect(t).toMatchObject({ status: "ok", reward: 1, attempt: 0, error: null, group_id: "g1" });
    const back = decodeBatch(encodeBatch("Trajectory", [t], null)).rows[0] as Trajectory;
    expect(back.trajectory_id).toBe("t1");
    expect(back.segments.length).toBe(2);
  });

  it("an env_error ships no reward and no token data, whatever the sandbox said, and names the kind", () => {
    const t = buildTrajectory({ identity, session: session([seg("main-a", "main", 1)]), outcome: outcome({ status: "env_error", reward: 1, attempts: 3, envError: { kind: "container_died", message: "gone" } }), wallTimeS: 1, routing: null });
    expect(t).toMatchObject({ status: "env_error", reward: null, attempt: 2, error: "container_died: gone", segments: [] });
  });

  it("an agent_error keeps the tail of the log as its error", () => {
    const t = buildTrajectory({ identity, session: session([]), outcome: outcome({ status: "agent_error", reward: 0, log: "x".repeat(5000) + "boom" }), wallTimeS: 1, routing: null });
    expect(t.error!.endsWith("boom")).toBe(true);
    expect(t.error!.length).toBe(4096);
  });

  it("rejects a flag outside the schema's vocabulary instead of shipping it", () => {
    const bad = outcome({ defenseFlags: ["made_up" as never] });
    expect(() => buildTrajectory({ identity, session: session([]), outcome: bad, wallTimeS: 1, routing: null })).toThrow(SchemaError);
  });
});
