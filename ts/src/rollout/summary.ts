/**
 * The end-of-run summary, built only from the RolloutEvents stream: reward by
 * task and harness, statuses, env-error failures, groups shipped and what was
 * dropped. Also the JSON-lines log sink used when stdout is not a terminal.
 */
import type { RolloutEvent, RolloutEvents } from "./events.ts";

export interface RewardCell {
  task: string;
  harness: string;
  rollouts: number;
  meanReward: number;
}

export interface RunSummary {
  groupsShipped: number;
  trajectoriesShipped: number;
  droppedEnvErrors: number;
  retries: number;
  statuses: Record<string, number>;
  /** Env-error kinds over every attempt (retried ones included). */
  envErrors: Record<string, number>;
  rewardByTaskHarness: RewardCell[];
  rewardByHarness: Record<string, number>;
  pausedForStaleness: number;
  /** Shipped trajectories with a turn sampled more than --max-staleness behind the trainer. */
  overStalenessBound: number;
  wallS: number;
}

export class SummaryCollector {
  private readonly statuses: Record<string, number> = {};
  private readonly envErrors: Record<string, number> = {};
  private readonly rewards = new Map<string, { task: string; harness: string; sum: number; n: number }>();
  private readonly byHarness = new Map<string, { sum: number; n: number }>();
  private groups = 0;
  private shipped = 0;
  private dropped = 0;
  private retries = 0;
  private pauses = 0;
  private stale = 0;
  private readonly t0 = performance.now();

  constructor(events: RolloutEvents) {
    events.subscribe((e) => this.add(e));
  }

  private add(e: RolloutEvent): void {
    if (e.kind === "rollout_finished") {
      this.statuses[e.status] = (this.statuses[e.status] ?? 0) + 1;
      if (e.status === "env_error") this.countEnvError(e.envError);
      if (e.reward === null) return;
      const key = `${e.taskId}\0${e.harness}`;
      const cell = this.rewards.get(key) ?? { task: e.taskId, harness: e.harness, sum: 0, n: 0 };
      cell.sum += e.reward;
      cell.n += 1;
      this.rewards.set(key, cell);
      const h = this.byHarness.get(e.harness) ?? { sum: 0, n: 0 };
      h.sum += e.reward;
      h.n += 1;
      this.byHarness.set(e.harness, h);
    } else if (e.kind === "rollout_retried") {
      this.retries += 1;
      this.envErrors[e.envError] = (this.envErrors[e.envError] ?? 0) + 1;
    } else if (e.kind === "group_shipped") {
      if (e.trajectories) this.groups += 1;
      this.shipped += e.trajectories;
      this.dropped += e.droppedEnvErrors;
    } else if (e.kind === "paused_for_staleness") this.pauses += 1;
    else if (e.kind === "over_staleness_bound") this.stale += 1;
  }

  private countEnvError(error: string | null): void {
    const kind = error?.split(":")[0] ?? "env_error";
    this.envErrors[kind] = (this.envErrors[kind] ?? 0) + 1;
  }

  summary(): RunSummary {
    return {
      groupsShipped: this.groups,
      trajectoriesShipped: this.shipped,
      droppedEnvErrors: this.dropped,
      retries: this.retries,
      statuses: { ...this.statuses },
      envErrors: { ...this.envErrors },
      rewardByTaskHarness: [...this.rewards.values()].map((c) => ({ task: c.task, harness: c.harness, rollouts: c.n, meanReward: c.sum / c.n })),
      rewardByHarness: Object.fromEntries([...this.byHarness].map(([h, c]) => [h, c.sum / c.n])),
      pausedForStaleness: this.pauses,
      overStalenessBound: this.stale,
      wallS: Math.round((performance.now() - this.t0) / 100) / 10,
    };
  }
}

/** A terminal-friendly table of the summary. */
export function formatSummary(s: RunSummary): string {
  const rows = s.rewardByTaskHarness.map((c) => `${c.task}  ${c.harness}  n=${c.rollouts}  reward=${c.meanReward.toFixed(3)}`);
  const kv = (o: Record<string, number>) => Object.entries(o).map(([k, v]) => `${k} ${v}`).join(", ") || "none";
  return [
    ...rows,
    `${s.groupsShipped} groups, ${s.trajectoriesShipped} trajectories shipped; ${s.droppedEnvErrors} dropped after retries; ${s.retries} retries; ${s.wallS} s`,
    `statuses: ${kv(s.statuses)}; env errors: ${kv(s.envErrors)}; reward by harness: ${Object.entries(s.rewardByHarness).map(([h, r]) => `${h} ${r.toFixed(3)}`).join(", ") || "none"}`,
  ].join("\n");
}

/** One JSON line per event (the log when stdout is not a terminal). */
export function jsonLines(events: RolloutEvents, write: (line: string) => void): () => void {
  return events.subscribe((e) => write(`${JSON.stringify({ event: e.kind, ...e, kind: undefined })}\n`));
}
