/**
 * The worker's one typed event stream. Progress display, JSON-lines logs, the
 * end summary and metrics all subscribe here instead of each being called from
 * the worker, so adding a consumer never touches the rollout loop.
 */
import type { EnvErrorKind, OverLengthAction, TokenCounts, TrajectoryStatus } from "../schema/index.ts";
import type { HostCapacity } from "./hosts.ts";

export type RolloutEvent =
  | { kind: "rollout_started"; groupId: string; trajectoryId: string; taskId: string; attempt: number }
  | { kind: "rollout_finished"; groupId: string; trajectoryId: string; taskId: string; harness: string; status: TrajectoryStatus; reward: number | null; wallTimeS: number; envError: string | null; defenseFlags?: string[]; stageMs?: Partial<Record<"setup" | "agent" | "grading", number>> }
  // `error`: the env_error's kind and message, as a finished rollout's `envError` says it (why it is tried again).
  | { kind: "rollout_retried"; groupId: string; trajectoryId: string; envError: EnvErrorKind; error: string; attempt: number }
  // `trajectories`: records shipped, over-length drops included (they carry no segments); the totals are over those records.
  | { kind: "group_shipped"; groupId: string; taskId: string; trajectories: number; droppedEnvErrors: number; droppedOverLength?: number; tokens?: TokenCounts; toolCalls?: number; toolCallParseFailures?: number; stale?: number; policyVersions?: { min: number; max: number } | null }
  | { kind: "over_length"; groupId: string; trajectoryId: string; tokens: number; limit: number; action: OverLengthAction; reason: string }
  | { kind: "paused_for_staleness"; policyVersion: number; trainerVersion: number; maxStaleness: number }
  | { kind: "resumed"; policyVersion: number; trainerVersion: number }
  | { kind: "over_staleness_bound"; groupId: string; trajectoryId: string; oldestVersion: number; trainerVersion: number; maxStaleness: number }
  // Several Docker hosts (hosts.ts): an attempt (`TRAJECTORY.ATTEMPT`) placed on a host; a host stopped answering, or answers again after `downS`.
  | { kind: "rollout_placed"; rolloutId: string; host: string }
  | { kind: "docker_host_lost"; host: string; error: string }
  | { kind: "docker_host_back"; host: string; downS: number }
  /** A host's slots, once known: configured (=SLOTS) or from its daemon's resources (hosts.ts). */
  | ({ kind: "docker_host_capacity" } & HostCapacity);

export type RolloutEventKind = RolloutEvent["kind"];
type Listener = (event: RolloutEvent & { at: number }) => void;

export class RolloutEvents {
  private readonly listeners = new Set<Listener>();
  /** Listener failures, kept so a broken log sink cannot stop rollouts or go unseen. */
  readonly listenerErrors: unknown[] = [];

  constructor(private readonly now: () => number = Date.now) {}

  /** Returns the unsubscribe function. */
  subscribe(listener: Listener): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  emit(event: RolloutEvent): void {
    const stamped = { ...event, at: this.now() };
    for (const l of this.listeners) {
      try {
        l(stamped);
      } catch (e) {
        this.listenerErrors.push(e);
      }
    }
  }
}
