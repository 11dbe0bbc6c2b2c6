/**
 * The worker's staleness rule, in one place: a rollout may start only while
 * the weights it samples with are at most `maxStaleness` versions behind the
 * trainer's newest published version, and a finished rollout is over the
 * bound when its oldest turn was sampled further behind than that. The
 * transport only reports versions (Sender.policyVersion); it decides nothing.
 */
import type { Segment } from "../schema/index.ts";

export interface StalenessBound {
  /** Largest allowed trainer version minus sampling version; null = unbounded. */
  maxStaleness: number | null;
}

/** Whether a new rollout may start now (false = pause until the engine's weights catch up). */
export function mayStartRollout(bound: StalenessBound, samplingVersion: number, trainerVersion: number | null): boolean {
  if (bound.maxStaleness === null || trainerVersion === null) return true;
  return trainerVersion - samplingVersion <= bound.maxStaleness;
}

/** Oldest and newest policy version that sampled a turn of these segments (null: no turns). */
export function policyVersionRange(segments: readonly Segment[]): { min: number; max: number } | null {
  let range: { min: number; max: number } | null = null;
  for (const s of segments) {
    for (const turn of s.turns) {
      const v = turn.policy_version;
      range = range ? { min: Math.min(range.min, v), max: Math.max(range.max, v) } : { min: v, max: v };
    }
  }
  return range;
}

/**
 * True when a rollout whose oldest turn was sampled at `oldest` is more than the bound behind
 * `trainerVersion`. No bound, no turns or no announced trainer version: never over. Such a
 * rollout still ships (a partial rollout that spanned versions is never cut), flagged `stale`.
 */
export function overStalenessBound(bound: StalenessBound, oldest: number | null, trainerVersion: number | null): boolean {
  if (bound.maxStaleness === null || oldest === null || trainerVersion === null) return false;
  return trainerVersion - oldest > bound.maxStaleness;
}
