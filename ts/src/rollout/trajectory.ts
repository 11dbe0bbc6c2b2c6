/**
 * The one place a rollout becomes a Trajectory record: the proxy session's
 * sealed segments plus the sandbox's outcome, checked against the schema
 * before anything ships. Pure, so every status/flag/reward rule is testable
 * without Docker or an engine.
 */
import { DEFENSE_FLAG_VALUES, SchemaError, validateRecords, type RoutingShape, type Segment, type Trajectory } from "../schema/index.ts";
import type { RolloutOutcome } from "../sandbox/index.ts";

export interface TrajectoryIdentity {
  trajectoryId: string;
  groupId: string;
  taskId: string;
  harness: string;
}

/** What the proxy recorded for the rollout's session. */
export interface SessionRecords {
  segments: readonly Segment[];
  /** Counters the proxy can see that segments do not carry. */
  toolCalls: number;
  rereadsAfterEdit: number;
  rolledBackTurns: number;
}

export interface TrajectoryInput {
  identity: TrajectoryIdentity;
  session: SessionRecords;
  outcome: RolloutOutcome;
  wallTimeS: number;
  /** Routing shape of the policy, null for a dense model. */
  routing: RoutingShape | null;
}

/** Longest error text kept on a record (the full log stays with the operator). */
const MAX_ERROR_CHARS = 4096;

export function buildTrajectory(input: TrajectoryInput): Trajectory {
  const { identity, session, outcome } = input;
  // The record's column is list<string>, so the schema validator cannot see a foreign flag.
  const foreign = outcome.defenseFlags.filter((f) => !(DEFENSE_FLAG_VALUES as readonly string[]).includes(f));
  if (foreign.length) throw new SchemaError(`trajectory ${identity.trajectoryId}: defense flags outside the schema: ${foreign.join(", ")}`);
  const envError = outcome.status === "env_error";
  // Main thread first (schema order); stable within a thread.
  const main = session.segments.filter((s) => s.thread === "main");
  const side = session.segments.filter((s) => s.thread !== "main");
  const turnsOf = (segs: readonly Segment[]) => segs.reduce((n, s) => n + s.turns.length, 0);
  const trajectory: Trajectory = {
    trajectory_id: identity.trajectoryId,
    group_id: identity.groupId,
    task_id: identity.taskId,
    harness: identity.harness,
    status: outcome.status,
    // An env_error says nothing about the policy: no reward, whatever the sandbox reported.
    reward: envError ? null : outcome.reward,
    attempt: Math.max(0, outcome.attempts - 1),
    defense_flags: [...new Set(outcome.defenseFlags)].sort(),
    error: errorText(outcome),
    metrics: {
      turns: turnsOf(main),
      tool_calls: session.toolCalls,
      rereads_after_edit: session.rereadsAfterEdit,
      side_thread_turns: turnsOf(side),
      rolled_back_turns: session.rolledBackTurns,
      wall_time_s: input.wallTimeS,
    },
    // Token data of a broken environment never trains, so it is not shipped either.
    segments: envError ? [] : [...main, ...side],
  };
  validateRecords("Trajectory", [trajectory], input.routing);
  return trajectory;
}

function errorText(outcome: RolloutOutcome): string | null {
  if (outcome.status === "env_error") {
    const e = outcome.envError;
    return (e ? `${e.kind}: ${e.message}` : "env_error").slice(0, MAX_ERROR_CHARS);
  }
  if (outcome.status === "agent_error") return outcome.log.slice(-MAX_ERROR_CHARS);
  return null;
}
