/**
 * Seeded synthetic records: every token id, logprob and routing entry is a
 * formula of (seed, index), specified in schemas/vectors/README.md and
 * mirrored in python-bridge/lego_rl/schema/vectors.py, so both languages build
 * identical bits. The golden vectors, the benches' workloads and the partial
 * demo build their records here.
 */
import { TokenProvenance, type FinishReason, type RoutingArray, type Segment, type Trajectory, type Turn, type TurnSpan } from "./generated.ts";
import { allocRouting, routingPerToken, type RoutingShape } from "./routing.ts";

const VOCAB = 151643;
export const SPECIAL: Record<string, number> = { nan: NaN, inf: Infinity, "-inf": -Infinity };

export interface TurnSpec { turn_id: string; prompt: number; completion: number; tail: number; policy_version: number; finish_reason: FinishReason }
export interface SegmentSpec extends Omit<Segment, "token_ids" | "logprobs" | "loss_mask" | "provenance" | "routing" | "routing_recorded" | "turns"> {
  seed: number;
  turns: TurnSpec[];
  logprob_overrides?: Record<string, string | number>;
  routing_unrecorded?: number[];
}
export interface TrajectorySpec extends Omit<Trajectory, "segments"> { segments: SegmentSpec[] }
export interface TurnRecordSpec extends Omit<Turn, "prompt_ids" | "completion_ids" | "logprobs" | "routing" | "prompt_routing"> {
  seed: number;
  prompt: number;
  completion: number;
  prompt_routing: boolean;
  logprob_overrides?: Record<string, string | number>;
}
export function tokenId(seed: number, index: number): number {
  return (seed * 7919 + index * 104729) % VOCAB;
}

/** k/64 is exact in float32, so both languages produce identical bits; (0 - k) keeps k = 0 a positive zero. */
export function sampledLogprob(seed: number, index: number): number {
  return (0 - ((seed * 31 + index * 17) % 1024)) / 64;
}

function fillRouting(seed: number, first: number, count: number, shape: RoutingShape): RoutingArray {
  const out = allocRouting(shape, count);
  const per = routingPerToken(shape);
  for (let t = 0; t < count; t++) {
    const index = first + t;
    for (let l = 0; l < shape.layers; l++) {
      for (let k = 0; k < shape.top_k; k++) {
        out[t * per + l * shape.top_k + k] = (seed * 13 + index * 7 + l * 5 + k * 3) % shape.num_experts;
      }
    }
  }
  return out;
}

function applyOverrides(logprobs: Float32Array, overrides: Record<string, string | number> = {}): void {
  for (const [index, value] of Object.entries(overrides)) {
    logprobs[Number(index)] = typeof value === "string" ? SPECIAL[value]! : value;
  }
}

export function buildSegment(spec: SegmentSpec, shape: RoutingShape | null): Segment {
  const total = spec.turns.reduce((n, t) => n + t.prompt + t.completion + t.tail, 0);
  const provenance = new Uint8Array(total);
  const turns: TurnSpan[] = [];
  let cursor = 0;
  for (const turn of spec.turns) {
    const start = cursor + turn.prompt;
    const end = start + turn.completion;
    provenance.fill(TokenProvenance.prompt, cursor, start);
    provenance.fill(TokenProvenance.sampled, start, end);
    provenance.fill(TokenProvenance.template, end, end + turn.tail);
    cursor = end + turn.tail;
    turns.push({ turn_id: turn.turn_id, completion_start: start, completion_end: end, policy_version: turn.policy_version, finish_reason: turn.finish_reason });
  }
  const tokenIds = new Int32Array(total);
  const logprobs = new Float32Array(total);
  const lossMask = new Uint8Array(total);
  for (let i = 0; i < total; i++) {
    tokenIds[i] = tokenId(spec.seed, i);
    if (provenance[i] === TokenProvenance.sampled) {
      logprobs[i] = sampledLogprob(spec.seed, i);
      lossMask[i] = 1;
    }
  }
  applyOverrides(logprobs, spec.logprob_overrides);
  let recorded: Uint8Array | null = null;
  if (shape) {
    recorded = new Uint8Array(total).fill(1);
    for (const i of spec.routing_unrecorded ?? []) recorded[i] = 0;
  }
  return {
    segment_id: spec.segment_id,
    thread: spec.thread,
    thread_id: spec.thread_id,
    seal_reason: spec.seal_reason,
    token_ids: tokenIds,
    logprobs,
    loss_mask: lossMask,
    provenance,
    routing: shape ? fillRouting(spec.seed, 0, total, shape) : null,
    routing_recorded: recorded,
    turns,
  };
}

export function buildTrajectory(spec: TrajectorySpec, shape: RoutingShape | null): Trajectory {
  return { ...spec, segments: spec.segments.map((s) => buildSegment(s, shape)) };
}

export function buildTurn(spec: TurnRecordSpec, shape: RoutingShape | null): Turn {
  const { seed, prompt, completion } = spec;
  const promptIds = Int32Array.from({ length: prompt }, (_, i) => tokenId(seed, i));
  const completionIds = Int32Array.from({ length: completion }, (_, j) => tokenId(seed, prompt + j));
  const logprobs = Float32Array.from({ length: completion }, (_, j) => sampledLogprob(seed, j));
  applyOverrides(logprobs, spec.logprob_overrides);
  return {
    turn_id: spec.turn_id,
    session_id: spec.session_id,
    thread_id: spec.thread_id,
    prompt_ids: promptIds,
    completion_ids: completionIds,
    logprobs,
    routing: shape ? fillRouting(seed, prompt, completion, shape) : null,
    prompt_routing: shape && spec.prompt_routing ? fillRouting(seed, 0, prompt, shape) : null,
    policy_version: spec.policy_version,
    finish_reason: spec.finish_reason,
    timings: spec.timings,
  };
}
