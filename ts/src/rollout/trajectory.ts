/**
 * The one place a rollout becomes a Trajectory record: the proxy session's
 * sealed segments plus the sandbox's outcome plus what the worker knows as the
 * group ships (the trainer's newest version, the staleness bound, the
 * over-length policy), checked against the schema before anything ships.
 * Pure, so every status/flag/reward/staleness/length rule is testable without
 * Docker or an engine.
 *
 * Behaviour counters, tokens and policy versions describe the rollout as the
 * proxy recorded it (before any over-length cut), like `metrics.turns`; the
 * segments are what the trainer gets.
 */
import { DEFENSE_FLAG_VALUES, SchemaError, TokenProvenance, validateRecords, type RoutingShape, type Segment, type TokenCounts, type Trajectory } from "../schema/index.ts";
import type { RolloutOutcome } from "../sandbox/index.ts";
import { fitToLength, type LengthPolicy } from "./over-length.ts";
import { overStalenessBound, policyVersionRange, type StalenessBound } from "./staleness.ts";

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
  /** Tool-call blocks on the main thread that did not parse (left in the text for the harness). */
  toolCallParseFailures: number;
  rereadsAfterEdit: number;
  rolledBackTurns: number;
}

/** What the worker knows when the rollout's group ships. */
export interface ShipContext {
  staleness: StalenessBound;
  /** The trainer's newest announced policy version (Sender.policyVersion); null before any. */
  trainerVersion: number | null;
  /** The trainer's maximum sequence and what happens to a longer rollout; null = no bound. */
  length: LengthPolicy | null;
}

export interface TrajectoryInput {
  identity: TrajectoryIdentity;
  session: SessionRecords;
  outcome: RolloutOutcome;
  wallTimeS: number;
  /** Routing shape of the policy, null for a dense model. */
  routing: RoutingShape | null;
  ship: ShipContext;
}

/** No bounds and no trainer version known (tools that only grade, and tests). */
export const UNBOUNDED_SHIP: ShipContext = { staleness: { maxStaleness: null }, trainerVersion: null, length: null };

/** Longest error text kept on a record (the full log stays with the operator). */
const MAX_ERROR_CHARS = 4096;

export function buildTrajectory(input: TrajectoryInput): Trajectory {
  const { identity, session, outcome, ship } = input;
  // The record's column is list<string>, so the schema validator cannot see a foreign flag.
  const foreign = outcome.defenseFlags.filter((f) => !(DEFENSE_FLAG_VALUES as readonly string[]).includes(f));
  if (foreign.length) throw new SchemaError(`trajectory ${identity.trajectoryId}: defense flags outside the schema: ${foreign.join(", ")}`);
  const envError = outcome.status === "env_error";
  // Main thread first (schema order); stable within a thread.
  const main = session.segments.filter((s) => s.thread === "main");
  const side = session.segments.filter((s) => s.thread !== "main");
  const recorded = [...main, ...side];
  const turnsOf = (segs: readonly Segment[]) => segs.reduce((n, s) => n + s.turns.length, 0);
  // Token data of a broken environment never trains, so it is not shipped either (nor judged for length).
  const fitted = envError ? { segments: [], overLength: null } : fitToLength(recorded, ship.length, input.routing);
  const dropped = fitted.overLength?.action === "dropped";
  const versions = policyVersionRange(recorded);
  const timings = outcome.timingsMs;
  const trajectory: Trajectory = {
    trajectory_id: identity.trajectoryId,
    group_id: identity.groupId,
    task_id: identity.taskId,
    harness: identity.harness,
    status: outcome.status,
    // An env_error says nothing about the policy: no reward, whatever the sandbox reported. An
    // over-length drop keeps none either, so even a reader that predates `over_length` cannot train on it.
    reward: envError || dropped ? null : outcome.reward,
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
    segments: fitted.segments,
    tool_call_parse_failures: session.toolCallParseFailures,
    tokens: tokenCounts(recorded),
    stage_seconds: { setup: seconds(timings.setup), agent: seconds(timings.agent), grading: seconds(timings.grading) },
    min_policy_version: versions?.min ?? null,
    max_policy_version: versions?.max ?? null,
    trainer_version_at_ship: ship.trainerVersion,
    stale: overStalenessBound(ship.staleness, versions?.min ?? null, ship.trainerVersion),
    over_length: fitted.overLength,
  };
  validateRecords("Trajectory", [trajectory], input.routing);
  return trajectory;
}

/** Prompt (harness or template), completion (sampled) and trainable (loss mask 1) tokens of the segments. */
export function tokenCounts(segments: readonly Segment[]): TokenCounts {
  let completion = 0;
  let trainable = 0;
  let all = 0;
  for (const s of segments) {
    all += s.token_ids.length;
    for (let i = 0; i < s.provenance.length; i++) completion += s.provenance[i] === TokenProvenance.sampled ? 1 : 0;
    for (let i = 0; i < s.loss_mask.length; i++) trainable += s.loss_mask[i]!;
  }
  return { prompt: all - completion, completion, trainable };
}

/** The record's error text: the env-error kind and message, or the tail of the agent's log; null otherwise. */
export function errorText(outcome: RolloutOutcome): string | null {
  if (outcome.status === "env_error") {
    const e = outcome.envError;
    return (e ? `${e.kind}: ${e.message}` : "env_error").slice(0, MAX_ERROR_CHARS);
  }
  if (outcome.status === "agent_error") return outcome.log.slice(-MAX_ERROR_CHARS);
  return null;
}

const seconds = (ms: number | undefined): number | null => (ms === undefined ? null : ms / 1000);
