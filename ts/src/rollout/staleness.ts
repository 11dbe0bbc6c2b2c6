/**
 * The worker's staleness rule, in one place: a rollout may start only while
 * the weights it samples with are at most `maxStaleness` versions behind the
 * trainer's newest published version, and a finished trajectory is over the
 * bound when any of its turns was sampled further behind than that. The
 * transport only reports versions (Sender.policyVersion); it decides nothing.
 */
import type { Trajectory } from "../schema/index.ts";

export interface StalenessBound {
  /** Largest allowed trainer version minus sampling version; null = unbounded. */
  maxStaleness: number | null;
}

/** Whether a new rollout may start now (false = pause until the engine's weights catch up). */
export function mayStartRollout(bound: StalenessBound, samplingVersion: number, trainerVersion: number | null): boolean {
  if (bound.maxStaleness === null || trainerVersion === null) return true;
  return trainerVersion - samplingVersion <= bound.maxStaleness;
}

/** Oldest policy version any turn of the trajectory was sampled with (null: no turns). */
export function oldestPolicyVersion(t: Trajectory): number | null {
  let oldest: number | null = null;
  for (const s of t.segments) for (const turn of s.turns) oldest = oldest === null ? turn.policy_version : Math.min(oldest, turn.policy_version);
  return oldest;
}

/** True when the trajectory holds a turn sampled more than the bound behind `trainerVersion`. */
export function overStalenessBound(bound: StalenessBound, t: Trajectory, trainerVersion: number): boolean {
  const oldest = oldestPolicyVersion(t);
  if (bound.maxStaleness === null || oldest === null) return false;
  return trainerVersion - oldest > bound.maxStaleness;
}

/** One shipped trajectory over the bound, as the worker reports it (the trainer may drop or correct it). */
export interface StaleTrajectory {
  trajectoryId: string;
  oldestVersion: number;
  trainerVersion: number;
}

/**
 * The trajectories of a group that are over the bound at ship time, judged against the trainer's
 * newest announced version (none known: none over). They are shipped, not cut: a partial rollout
 * that spanned weight versions is the trainer's to correct (TIS/MIS), but never unflagged.
 */
export function staleAtShip(bound: StalenessBound, group: readonly Trajectory[], trainerVersion: number | null): StaleTrajectory[] {
  if (trainerVersion === null) return [];
  return group
    .filter((t) => overStalenessBound(bound, t, trainerVersion))
    .map((t) => ({ trajectoryId: t.trajectory_id, oldestVersion: oldestPolicyVersion(t)!, trainerVersion }));
}
