import { describe, expect, it } from "vitest";
import { SchemaError, decodeBatch, encodeBatch, type Segment, type Trajectory } from "../schema/index.ts";
import { synthetic } from "../schema/index.ts";
import type { RolloutOutcome } from "../sandbox/index.ts";
import { UNBOUNDED_SHIP, buildTrajectory, type SessionRecords } from "./index.ts";

const turn = (id: string, version = 3) => ({ turn_id: id, prompt: 5, completion: 4, tail: 2, policy_version: version, finish_reason: "stop" as const });
const seg = (id: string, thread: "main" | "side", turns: number, versions: number[] = []): Segment =>
  synthetic.buildSegment({ segment_id: id, thread, thread_id: `${thread}-0`, seal_reason: "finished", seed: id.length, turns: Array.from({ length: turns }, (_, i) => turn(`${id}.${i}`, versions[i])) }, null);

const session = (segments: Segment[]): SessionRecords => ({ segments, toolCalls: 7, toolCallParseFailures: 2, rereadsAfterEdit: 1, rolledBackTurns: 0 });
const ship = UNBOUNDED_SHIP;
const outcome = (o: Partial<RolloutOutcome>): RolloutOutcome => ({ status: "ok", reward: 1, defenseFlags: [], attempts: 1, timingsMs: {}, log: "", ...o });
const identity = { trajectoryId: "t1", groupId: "g1", taskId: "task", harness: "oracle" };

describe("buildTrajectory", () => {
  it("puts the main thread first, counts turns per thread and survives an Arrow round trip", () => {
    const t = buildTrajectory({ identity, session: session([seg("side-a", "side", 1), seg("main-a", "main", 2)]), outcome: outcome({ defenseFlags: ["timeout", "network_attempt", "timeout"] }), wallTimeS: 2.5, routing: null, ship });
    expect(t.segments.map((s) => s.thread)).toEqual(["main", "side"]);
    expect(t.metrics).toEqual({ turns: 2, tool_calls: 7, rereads_after_edit: 1, side_thread_turns: 1, rolled_back_turns: 0, wall_time_s: 2.5 });
    expect(t.defense_flags).toEqual(["network_attempt", "timeout"]);
    expect(t).toMatchObject({ status: "ok", reward: 1, attempt: 0, error: null, group_id: "g1" });
    const back = decodeBatch(encodeBatch("Trajectory", [t], null)).rows[0] as Trajectory;
    expect(back.trajectory_id).toBe("t1");
    expect(back.segments.length).toBe(2);
  });

  it("an env_error ships no reward and no token data, whatever the sandbox said, and names the kind", () => {
    const t = buildTrajectory({ identity, session: session([seg("main-a", "main", 1)]), outcome: outcome({ status: "env_error", reward: 1, attempts: 3, envError: { kind: "container_died", message: "gone" } }), wallTimeS: 1, routing: null, ship });
    expect(t).toMatchObject({ status: "env_error", reward: null, attempt: 2, error: "container_died: gone", segments: [] });
  });

  it("an agent_error keeps the tail of the log as its error", () => {
    const t = buildTrajectory({ identity, session: session([]), outcome: outcome({ status: "agent_error", reward: 0, log: "x".repeat(5000) + "boom" }), wallTimeS: 1, routing: null, ship });
    expect(t.error!.endsWith("boom")).toBe(true);
    expect(t.error!.length).toBe(4096);
  });

  it("records tokens, tool-call parse failures, stage seconds and the policy versions of its turns", () => {
    // main: 2 turns of 5 prompt + 4 sampled + 2 template tokens at versions 4 and 6; side: 1 turn at version 5.
    const segments = [seg("main-a", "main", 2, [4, 6]), seg("side-a", "side", 1, [5])];
    const t = buildTrajectory({ identity, session: session(segments), outcome: outcome({ timingsMs: { setup: 1500, agent: 250 } }), wallTimeS: 2, routing: null, ship });
    expect(t).toMatchObject({
      tool_call_parse_failures: 2, tokens: { prompt: 21, completion: 12, trainable: 12 },
      stage_seconds: { setup: 1.5, agent: 0.25, grading: null }, min_policy_version: 4, max_policy_version: 6,
      trainer_version_at_ship: null, stale: false, over_length: null,
    });
    const back = decodeBatch(encodeBatch("Trajectory", [t], null)).rows[0] as Trajectory;
    expect(back).toMatchObject({ tokens: t.tokens, stage_seconds: t.stage_seconds, min_policy_version: 4, max_policy_version: 6, stale: false, over_length: null });
  });

  it("is stale exactly when its oldest turn is more than --max-staleness behind the trainer's version at ship", () => {
    const build = (trainerVersion: number | null, maxStaleness: number | null) =>
      buildTrajectory({ identity, session: session([seg("main-a", "main", 2, [4, 6])]), outcome: outcome({}), wallTimeS: 1, routing: null, ship: { staleness: { maxStaleness }, trainerVersion, length: null } });
    expect(build(6, 2)).toMatchObject({ stale: false, trainer_version_at_ship: 6 });
    expect(build(7, 2)).toMatchObject({ stale: true, trainer_version_at_ship: 7, min_policy_version: 4 });
    expect(build(100, null).stale).toBe(false);
    expect(build(null, 0)).toMatchObject({ stale: false, trainer_version_at_ship: null });
    // No turns (the oracle): nothing sampled, never stale.
    expect(buildTrajectory({ identity, session: session([]), outcome: outcome({}), wallTimeS: 1, routing: null, ship: { staleness: { maxStaleness: 0 }, trainerVersion: 9, length: null } }))
      .toMatchObject({ stale: false, min_policy_version: null, max_policy_version: null });
  });

  it("over length: truncate keeps the reward and says the original length; drop keeps neither segments nor reward", () => {
    // main-a: 2 turns of 11 tokens = 22 tokens.
    const build = (overLength: "drop" | "truncate") =>
      buildTrajectory({ identity, session: session([seg("main-a", "main", 2)]), outcome: outcome({}), wallTimeS: 1, routing: null, ship: { ...ship, length: { maxSequenceTokens: 16, overLength } } });
    const cut = build("truncate");
    expect(cut).toMatchObject({ reward: 1, over_length: { action: "truncated", tokens: 22, limit: 16 }, tokens: { prompt: 14, completion: 8, trainable: 8 } });
    expect(cut.segments[0]!.token_ids.length).toBe(16);
    const dropped = build("drop");
    expect(dropped).toMatchObject({ status: "ok", reward: null, segments: [], over_length: { action: "dropped", tokens: 22, limit: 16 }, min_policy_version: 3 });
    const back = decodeBatch(encodeBatch("Trajectory", [dropped], null)).rows[0] as Trajectory;
    expect(back.over_length).toEqual({ action: "dropped", tokens: 22, limit: 16 });
  });

  it("rejects a flag outside the schema's vocabulary instead of shipping it", () => {
    const bad = outcome({ defenseFlags: ["made_up" as never] });
    expect(() => buildTrajectory({ identity, session: session([]), outcome: bad, wallTimeS: 1, routing: null, ship })).toThrow(SchemaError);
  });
});
