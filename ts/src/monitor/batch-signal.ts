/**
 * Summarises one decoded rollout batch into the metric keys the batch-side alert rules read,
 * so spooled batches pass through the same Monitor as trainer steps.
 */
import type { Trajectory } from "../schema/index.ts";
import type { Signal } from "./rules.ts";

export function batchSignal(trajectories: readonly Trajectory[]): Signal {
  const n = trajectories.length;
  if (n === 0) return {};
  let recorded = 0, routed = 0, trainable = 0, turns = 0, toolCalls = 0;
  // Parse failures are on records from schema 2.3 on; older ones say nothing (null) and are left out of the rate.
  let parseFailures = 0, callsOfCounted = 0, counted = 0;
  for (const t of trajectories) {
    turns += t.metrics.turns;
    toolCalls += t.metrics.tool_calls;
    if (t.tool_call_parse_failures != null) {
      counted++;
      parseFailures += t.tool_call_parse_failures;
      callsOfCounted += t.metrics.tool_calls;
    }
    for (const s of t.segments) {
      for (let i = 0; i < s.loss_mask.length; i++) {
        if (s.loss_mask[i] !== 1) continue;
        trainable++;
        // Coverage counts trainable tokens only: those are the ones whose replayed experts shape the gradient.
        if (s.routing_recorded !== null) { routed++; recorded += s.routing_recorded[i] === 1 ? 1 : 0; }
      }
    }
  }
  const signal: Signal = {
    "reward/flag_rate": trajectories.filter((t) => t.defense_flags.length > 0).length / n,
    "episode/env_error_rate": trajectories.filter((t) => t.status === "env_error").length / n,
    "episode/turns": turns / n,
    "episode/response_tokens": trainable / n,
  };
  if (turns > 0) signal["tools/calls_per_turn"] = toolCalls / turns;
  if (counted > 0) signal["tools/parse_failure_rate"] = parseFailures / Math.max(1, parseFailures + callsOfCounted);
  if (routed > 0) signal["routing/coverage"] = recorded / routed;
  return signal;
}
