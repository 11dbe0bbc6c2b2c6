/** Real Arrow batches (encoded and decoded) summarised and fed through the monitor. */
import { describe, expect, it } from "vitest";
import { decodeBatch, type RoutingShape, type Trajectory } from "../schema/index.ts";
import { encodeTrajectoryBatch, replicate, syntheticTrajectory } from "../transport/index.ts";
import { batchSignal, Monitor } from "./index.ts";

const routing: RoutingShape = { layers: 2, top_k: 2, num_experts: 8 };
const roundTrip = (ts: Trajectory[], seq: number) =>
  decodeBatch(encodeTrajectoryBatch(ts, routing, { batchId: `b-${seq}`, producerId: "w", seq }).payload, "Trajectory").rows as Trajectory[];
const healthyBatch = (seq: number) => replicate(syntheticTrajectory("t", 200, routing), 4, `s${seq}`);

describe("batch signal", () => {
  it("is silent on healthy spooled batches", () => {
    const m = new Monitor();
    for (let i = 0; i < 20; i++) m.observe(i, batchSignal(roundTrip(healthyBatch(i), i)));
    expect(m.alerts).toEqual([]);
  });

  it("raises routing_coverage_low when engine routing is missing for trainable tokens", () => {
    const m = new Monitor();
    const bad = healthyBatch(1).map((t) => ({ ...t, segments: t.segments.map((s) => ({ ...s, routing_recorded: s.routing_recorded && s.routing_recorded.map(() => 0) })) }));
    const sig = batchSignal(roundTrip(bad, 1));
    expect(sig["routing/coverage"]).toBe(0);
    expect(m.observe(1, sig).map((a) => a.kind)).toEqual(["routing_coverage_low"]);
  });

  it("raises tool_parse_failures from the records' tool-call parse failures", () => {
    const m = new Monitor();
    const kinds: string[] = [];
    for (let i = 0; i < 6; i++) {
      const b = healthyBatch(i).map((t) => ({ ...t, metrics: { ...t.metrics, tool_calls: 3 }, tool_call_parse_failures: i < 2 ? 0 : 1 }));
      const sig = batchSignal(roundTrip(b, i));
      expect(sig["tools/parse_failure_rate"]).toBe(i < 2 ? 0 : 0.25);
      kinds.push(...m.observe(i, sig).map((a) => a.kind));
    }
    expect(kinds).toContain("tool_parse_failures");
  });

  it("raises reward_hack_rate and env_error_spike from flagged and env_error trajectories", () => {
    const m = new Monitor();
    const kinds: string[] = [];
    for (let i = 0; i < 6; i++) {
      const b = healthyBatch(i).map((t, j) => (j === 0 ? { ...t, defense_flags: ["tampered_test_path"] } : j === 1 ? { ...t, status: "env_error" as const, reward: null } : t));
      kinds.push(...m.observe(i, batchSignal(roundTrip(b, i))).map((a) => a.kind));
    }
    expect(new Set(kinds)).toEqual(new Set(["reward_hack_rate", "env_error_spike"]));
  });
});
