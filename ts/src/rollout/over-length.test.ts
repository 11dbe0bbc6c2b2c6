/** The over-length policy on synthetic segments: drop keeps none and says why, truncate cuts every per-token column and the spans with the tokens. */
import { describe, expect, it } from "vitest";
import { synthetic, validateRecords, type RoutingShape, type Trajectory } from "../schema/index.ts";
import { fitToLength, overLengthReason, truncateSegment } from "./over-length.ts";
import { SummaryCollector } from "./summary.ts";
import { RolloutEvents } from "./events.ts";
import { buildWorkerConfig } from "./config.ts";

const SHAPE: RoutingShape = { layers: 2, top_k: 2, num_experts: 8 };

function trajectory(routing: RoutingShape | null): Trajectory {
  const turn = (id: string, prompt: number, completion: number) => ({ turn_id: id, prompt, completion, tail: 2, policy_version: 1, finish_reason: "stop" as const });
  return synthetic.buildTrajectory({
    trajectory_id: "t1", group_id: "g", task_id: "task", harness: "reference", status: "ok", reward: 1, attempt: 0, defense_flags: [], error: null,
    metrics: { turns: 3, tool_calls: 2, rereads_after_edit: 0, side_thread_turns: 0, rolled_back_turns: 0, wall_time_s: 1 },
    segments: [
      // 10+5+2, 3+6+2, 4+8+2 = 42 tokens: turn a [10,15), b [20,26), c [32,40).
      { segment_id: "main-0", thread: "main", thread_id: "main", seal_reason: "finished", seed: 1, turns: [turn("a", 10, 5), turn("b", 3, 6), turn("c", 4, 8)] },
      { segment_id: "side-0", thread: "side", thread_id: "s1", seal_reason: "finished", seed: 2, turns: [turn("s", 4, 3)] },
    ],
  }, routing);
}

describe("over-length policy", () => {
  it("leaves segments within the bound, or with no bound, as they are", () => {
    const t = trajectory(null);
    expect(fitToLength(t.segments, { maxSequenceTokens: null, overLength: "drop" }, null)).toEqual({ segments: t.segments, overLength: null });
    expect(fitToLength(t.segments, null, null).overLength).toBeNull();
    expect(fitToLength(t.segments, { maxSequenceTokens: 42, overLength: "drop" }, null).segments[0]).toBe(t.segments[0]);
  });

  it("drop: no segment ships, and the verdict and reason name the bound and the length", () => {
    const r = fitToLength(trajectory(null).segments, { maxSequenceTokens: 41, overLength: "drop" }, null);
    expect(r).toEqual({ segments: [], overLength: { action: "dropped", tokens: 42, limit: 41 } });
    expect(overLengthReason(r.overLength!)).toBe("longest segment of 42 tokens is longer than the trainer's 41 tokens: dropped (shipped without segments or reward)");
  });

  it("truncate: tokens, logprobs, loss mask, provenance and routing cut together; spans past the cut gone, a straddling one clipped", () => {
    const t = trajectory(SHAPE);
    const r = fitToLength(t.segments, { maxSequenceTokens: 24, overLength: "truncate" }, SHAPE);
    const main = r.segments[0]!;
    const before = t.segments[0]!;
    expect(main.token_ids).toEqual(before.token_ids.slice(0, 24));
    expect(main.loss_mask).toEqual(before.loss_mask.slice(0, 24));
    expect(main.logprobs).toEqual(before.logprobs.slice(0, 24));
    expect(main.provenance).toEqual(before.provenance.slice(0, 24));
    expect(main.routing!.length).toBe(24 * SHAPE.layers * SHAPE.top_k);
    expect(main.routing).toEqual(before.routing!.slice(0, 24 * 4));
    expect(main.routing_recorded!.length).toBe(24);
    // Trainable tokens: all of a (5) and b's first 4 of 6; c's are gone.
    expect(main.loss_mask.reduce((n, m) => n + m, 0)).toBe(9);
    expect(main.turns.map((s) => [s.turn_id, s.completion_start, s.completion_end])).toEqual([["a", 10, 15], ["b", 20, 24]]);
    // The side segment (9 tokens) was within the bound: untouched.
    expect(r.segments[1]).toBe(t.segments[1]);
    expect(r.overLength).toEqual({ action: "truncated", tokens: 42, limit: 24 });
    expect(overLengthReason(r.overLength!)).toBe("longest segment of 42 tokens cut to the trainer's 24 tokens");
    expect(() => validateRecords("Trajectory", [{ ...t, segments: r.segments, over_length: r.overLength }], SHAPE)).not.toThrow();
    // The original is not changed (the worker may still log it).
    expect(t.segments[0]!.token_ids.length).toBe(42);
  });

  it("a cut that falls inside a prompt keeps no span of the turn it belongs to", () => {
    const s = truncateSegment(trajectory(null).segments[0]!, 18, null);
    expect(s.turns.map((x) => x.turn_id)).toEqual(["a"]);
    expect(s.loss_mask.reduce((n, m) => n + m, 0)).toBe(5);
  });

  it("is counted in the summary by action, and the config names a bad policy or bound", () => {
    const events = new RolloutEvents();
    const summary = new SummaryCollector(events);
    events.emit({ kind: "over_length", groupId: "g", trajectoryId: "a", tokens: 9, limit: 8, action: "dropped", reason: "x" });
    events.emit({ kind: "over_length", groupId: "g", trajectoryId: "b", tokens: 9, limit: 8, action: "truncated", reason: "x" });
    events.emit({ kind: "over_length", groupId: "g", trajectoryId: "c", tokens: 9, limit: 8, action: "truncated", reason: "x" });
    expect(summary.summary().overLength).toEqual({ dropped: 1, truncated: 2 });
    const base = { tasks: "easy", harness: "oracle", trainer: "tcp://127.0.0.1:1" };
    expect(buildWorkerConfig({}, base)).toMatchObject({ maxSequenceTokens: null, overLength: "drop" });
    expect(() => buildWorkerConfig({}, { ...base, overLength: "squash" as "drop" })).toThrow(/--over-length must be drop or truncate, got "squash"/);
    expect(() => buildWorkerConfig({}, { ...base, maxSequenceTokens: 0 })).toThrow(/--max-sequence-tokens must be a positive integer/);
  });
});
