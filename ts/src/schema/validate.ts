/**
 * Structural validation of decoded records (the TS twin of lego_rl.schema.validate).
 *
 * Decoding preserves values bit for bit, NaN and infinities included; whether a
 * batch may train is answered separately by `trainableProblems`.
 */
import { RecordShapeError } from "./errors.ts";
import {
  FINISH_REASON_VALUES, OVER_LENGTH_ACTION_VALUES, SEAL_REASON_VALUES, SEGMENT_THREAD_VALUES, TRAJECTORY_STATUS_VALUES, TokenProvenance,
  type ArrowRecordName, type RecordTypes, type RoutingArray, type Segment, type Trajectory, type Turn,
} from "./generated.ts";
import { routingPerToken, type RoutingShape } from "./routing.ts";

function checkEnum(value: string, allowed: readonly string[], where: string): void {
  if (!allowed.includes(value)) throw new RecordShapeError(`${where}=${JSON.stringify(value)} is not one of ${allowed.join(", ")}`);
}

function checkRouting(routing: RoutingArray | null, tokens: number, shape: RoutingShape | null, where: string, unit: string): void {
  if (routing === null) return;
  if (shape === null) throw new RecordShapeError(`${where}: holds routing but the batch metadata declares a dense model`);
  const expected = tokens * routingPerToken(shape);
  if (routing.length !== expected) {
    throw new RecordShapeError(
      `${where}: routing has ${routing.length} values; expected ${unit} x layers x top_k = ` +
        `${tokens} x ${shape.layers} x ${shape.top_k} = ${expected}`,
    );
  }
  for (let i = 0; i < routing.length; i++) {
    if (routing[i]! >= shape.num_experts) {
      throw new RecordShapeError(`${where}: routing holds expert id ${routing[i]} but the model has ${shape.num_experts} experts`);
    }
  }
}

export function validateSegment(segment: Segment, shape: RoutingShape | null, owner: string): void {
  const where = `trajectory '${owner}' segment '${segment.segment_id}'`;
  checkEnum(segment.thread, SEGMENT_THREAD_VALUES, `${where}.thread`);
  checkEnum(segment.seal_reason, SEAL_REASON_VALUES, `${where}.seal_reason`);
  const tokens = segment.token_ids.length;
  for (const name of ["logprobs", "loss_mask", "provenance"] as const) {
    if (segment[name].length !== tokens) {
      throw new RecordShapeError(`${where}: ${name} has ${segment[name].length} values for ${tokens} tokens`);
    }
  }
  checkRouting(segment.routing, tokens, shape, where, "tokens");
  if ((segment.routing === null) !== (segment.routing_recorded === null)) {
    throw new RecordShapeError(`${where}: routing_recorded must be null exactly when routing is null`);
  }
  if (segment.routing_recorded && segment.routing_recorded.length !== tokens) {
    throw new RecordShapeError(`${where}: routing_recorded has ${segment.routing_recorded.length} values for ${tokens} tokens`);
  }
  for (let i = 0; i < tokens; i++) {
    const mask = segment.loss_mask[i]!;
    const provenance = segment.provenance[i]!;
    if (mask > 1) throw new RecordShapeError(`${where}: loss_mask[${i}] is ${mask}; only 0 and 1 are allowed`);
    if (provenance > TokenProvenance.sampled) {
      throw new RecordShapeError(`${where}: provenance[${i}] is ${provenance}; TokenProvenance is 0..${TokenProvenance.sampled}`);
    }
    if (mask === 1 && provenance !== TokenProvenance.sampled) {
      throw new RecordShapeError(`${where}: token ${i} has loss_mask 1 but was not sampled by the policy; only sampled tokens may train`);
    }
  }
  for (const span of segment.turns) {
    checkEnum(span.finish_reason, FINISH_REASON_VALUES, `${where} turn '${span.turn_id}'.finish_reason`);
    if (span.completion_start < 0 || span.completion_end < span.completion_start || span.completion_end > tokens) {
      throw new RecordShapeError(
        `${where}: turn span [${span.completion_start}, ${span.completion_end}) lies outside its ${tokens} tokens`,
      );
    }
  }
}

function validateTrajectory(trajectory: Trajectory, shape: RoutingShape | null): void {
  checkEnum(trajectory.status, TRAJECTORY_STATUS_VALUES, `trajectory '${trajectory.trajectory_id}'.status`);
  for (const segment of trajectory.segments) validateSegment(segment, shape, trajectory.trajectory_id);
  validateProvenance(trajectory);
}

/** The 2.3 version and over-length fields agree with each other (the twin of validate.py's _validate_provenance). */
function validateProvenance(t: Trajectory): void {
  const where = `trajectory '${t.trajectory_id}'`;
  const min = t.min_policy_version ?? null;
  const max = t.max_policy_version ?? null;
  if ((min === null) !== (max === null)) throw new RecordShapeError(`${where}: min_policy_version and max_policy_version must both be set or both null`);
  if (min !== null && max !== null && min > max) throw new RecordShapeError(`${where}: min_policy_version ${min} is above max_policy_version ${max}`);
  if (t.stale && (min === null || t.trainer_version_at_ship == null)) {
    throw new RecordShapeError(`${where}: stale is true but min_policy_version or trainer_version_at_ship is null (stale is judged from both)`);
  }
  const over = t.over_length;
  if (!over) return;
  checkEnum(over.action, OVER_LENGTH_ACTION_VALUES, `${where}.over_length.action`);
  if (over.limit <= 0 || over.tokens <= over.limit) {
    throw new RecordShapeError(`${where}: over_length says ${over.tokens} tokens over a limit of ${over.limit}; the original length must exceed a positive limit`);
  }
  if (over.action === "dropped" && (t.segments.length > 0 || t.reward !== null)) {
    throw new RecordShapeError(`${where}: an over-length drop ships no segments and no reward (so nothing trains on it); it holds ${t.segments.length} segment(s), reward ${t.reward}`);
  }
}

function validateTurn(turn: Turn, shape: RoutingShape | null): void {
  const where = `turn '${turn.turn_id}'`;
  checkEnum(turn.finish_reason, FINISH_REASON_VALUES, `${where}.finish_reason`);
  if (turn.logprobs.length !== turn.completion_ids.length) {
    throw new RecordShapeError(`${where}: ${turn.logprobs.length} logprobs for ${turn.completion_ids.length} completion tokens`);
  }
  checkRouting(turn.routing, turn.completion_ids.length, shape, where, "completion tokens");
  checkRouting(turn.prompt_routing, turn.prompt_ids.length, shape, where, "prompt tokens");
}

/** Throws RecordShapeError naming the first inconsistency. */
export function validateRecords<R extends ArrowRecordName>(record: R, rows: readonly RecordTypes[R][], shape: RoutingShape | null): void {
  for (const row of rows) {
    if (record === "Trajectory") validateTrajectory(row as Trajectory, shape);
    else validateTurn(row as Turn, shape);
  }
}

/** Reasons a valid trajectory must not train (empty when it may): non-finite or positive logprobs on trainable tokens. */
export function trainableProblems(trajectory: Trajectory): string[] {
  let nonFinite = 0;
  let positive = 0;
  for (const segment of trajectory.segments) {
    for (let i = 0; i < segment.token_ids.length; i++) {
      if (segment.loss_mask[i] !== 1) continue;
      const lp = segment.logprobs[i]!;
      if (!Number.isFinite(lp)) nonFinite += 1;
      else if (lp > 0) positive += 1;
    }
  }
  const problems: string[] = [];
  if (nonFinite) problems.push(`${nonFinite} trainable token(s) have a non-finite rollout logprob (NaN or inf)`);
  if (positive) problems.push(`${positive} trainable token(s) have a logprob above 0`);
  return problems;
}
