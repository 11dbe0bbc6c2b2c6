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
  /** Final statuses of each harness's rollouts (a mixed run's failures by harness). */
  statusesByHarness: Record<string, Record<string, number>>;
  /** Env-error kinds over every attempt (retried ones included). */
  envErrors: Record<string, number>;
  rewardByTaskHarness: RewardCell[];
  rewardByHarness: Record<string, number>;
  /** Failures by type: statuses other than ok, env-error kinds of final attempts, over-length drops. */
  failures: Record<string, number>;
  /** Defense flags raised, by flag (a flagged rollout usually scores 0). */
  defenseFlags: Record<string, number>;
  /** Finished rollouts and shipped trajectories per minute of the run's wall time. */
  throughput: { rolloutsPerMin: number; trajectoriesPerMin: number };
  /** Mean seconds per rollout in each sandbox stage (final attempts). */
  stageS: { setup: number; agent: number; grading: number };
  /** Trajectories longer than the trainer's maximum sequence, by what the policy did (never cut silently). */
  overLength: { dropped: number; truncated: number };
  pausedForStaleness: number;
  /** Shipped trajectories with a turn sampled more than --max-staleness behind the trainer (`stale` on the record). */
  overStalenessBound: number;
  /** Oldest and newest policy version that sampled a shipped turn; null when none did. */
  policyVersions: { min: number; max: number } | null;
  /** Tokens of the shipped rollouts as recorded (before any over-length cut). */
  tokens: { prompt: number; completion: number; trainable: number };
  /** Tool-call blocks that did not parse, and their share of the tool calls the policy wrote (format collapse). */
  toolCallParseFailures: number;
  toolCallParseFailureRate: number;
  wallS: number;
}

export class SummaryCollector {
  private readonly statuses: Record<string, number> = {};
  private readonly statusesByHarness: Record<string, Record<string, number>> = {};
  private readonly envErrors: Record<string, number> = {};
  private readonly rewards = new Map<string, { task: string; harness: string; sum: number; n: number }>();
  private readonly byHarness = new Map<string, { sum: number; n: number }>();
  private groups = 0;
  private shipped = 0;
  private dropped = 0;
  private retries = 0;
  private pauses = 0;
  private readonly overLength = { dropped: 0, truncated: 0 };
  private readonly failures: Record<string, number> = {};
  private readonly flags: Record<string, number> = {};
  private readonly stageMs = { setup: 0, agent: 0, grading: 0 };
  private finished = 0;
  private stale = 0;
  private readonly tokens = { prompt: 0, completion: 0, trainable: 0 };
  private parseFailures = 0;
  private toolCalls = 0;
  private versions: { min: number; max: number } | null = null;
  private readonly t0 = performance.now();

  constructor(events: RolloutEvents) {
    events.subscribe((e) => this.add(e));
  }

  private add(e: RolloutEvent): void {
    if (e.kind === "rollout_finished") {
      this.statuses[e.status] = (this.statuses[e.status] ?? 0) + 1;
      const mine = (this.statusesByHarness[e.harness] ??= {});
      mine[e.status] = (mine[e.status] ?? 0) + 1;
      this.finished += 1;
      if (e.status !== "ok") {
        const kind = e.status === "env_error" ? `env_error:${e.envError?.split(":")[0] ?? "unknown"}` : e.status;
        this.failures[kind] = (this.failures[kind] ?? 0) + 1;
      }
      for (const f of e.defenseFlags ?? []) this.flags[f] = (this.flags[f] ?? 0) + 1;
      for (const s of ["setup", "agent", "grading"] as const) this.stageMs[s] += e.stageMs?.[s] ?? 0;
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
      for (const k of ["prompt", "completion", "trainable"] as const) this.tokens[k] += e.tokens?.[k] ?? 0;
      this.parseFailures += e.toolCallParseFailures ?? 0;
      this.toolCalls += e.toolCalls ?? 0;
      const v = e.policyVersions;
      if (v) this.versions = { min: Math.min(this.versions?.min ?? v.min, v.min), max: Math.max(this.versions?.max ?? v.max, v.max) };
    } else if (e.kind === "over_length") {
      this.overLength[e.action] += 1;
      if (e.action === "dropped") this.failures.over_length = (this.failures.over_length ?? 0) + 1;
    }
    else if (e.kind === "paused_for_staleness") this.pauses += 1;
    else if (e.kind === "over_staleness_bound") this.stale += 1;
  }

  private countEnvError(error: string | null): void {
    const kind = error?.split(":")[0] ?? "env_error";
    this.envErrors[kind] = (this.envErrors[kind] ?? 0) + 1;
  }

  summary(): RunSummary {
    const min = (performance.now() - this.t0) / 60_000;
    const perMin = (n: number) => Math.round((n / Math.max(min, 1e-9)) * 10) / 10;
    const meanS = (ms: number) => Math.round(ms / Math.max(1, this.finished)) / 1000;
    return {
      groupsShipped: this.groups,
      trajectoriesShipped: this.shipped,
      droppedEnvErrors: this.dropped,
      retries: this.retries,
      statuses: { ...this.statuses },
      statusesByHarness: Object.fromEntries(Object.entries(this.statusesByHarness).map(([h, v]) => [h, { ...v }])),
      envErrors: { ...this.envErrors },
      rewardByTaskHarness: [...this.rewards.values()].map((c) => ({ task: c.task, harness: c.harness, rollouts: c.n, meanReward: c.sum / c.n })),
      rewardByHarness: Object.fromEntries([...this.byHarness].map(([h, c]) => [h, c.sum / c.n])),
      failures: { ...this.failures },
      defenseFlags: { ...this.flags },
      throughput: { rolloutsPerMin: perMin(this.finished), trajectoriesPerMin: perMin(this.shipped) },
      stageS: { setup: meanS(this.stageMs.setup), agent: meanS(this.stageMs.agent), grading: meanS(this.stageMs.grading) },
      overLength: { ...this.overLength },
      pausedForStaleness: this.pauses,
      overStalenessBound: this.stale,
      policyVersions: this.versions && { ...this.versions },
      tokens: { ...this.tokens },
      toolCallParseFailures: this.parseFailures,
      toolCallParseFailureRate: Math.round((this.parseFailures / Math.max(1, this.parseFailures + this.toolCalls)) * 1000) / 1000,
      wallS: Math.round((performance.now() - this.t0) / 100) / 10,
    };
  }
}

/** A terminal-friendly table of the summary. */
export function formatSummary(s: RunSummary): string {
  const kv = (o: Record<string, number>) => Object.entries(o).map(([k, v]) => `${k} ${v}`).join(", ") || "none";
  const width = Math.max(4, ...s.rewardByTaskHarness.map((c) => c.task.length));
  const rows = s.rewardByTaskHarness.map((c) => `  ${c.task.padEnd(width)}  ${c.harness}  n=${c.rollouts}  reward=${c.meanReward.toFixed(3)}`);
  return [
    "reward by task and harness:",
    ...rows,
    `reward by harness: ${Object.entries(s.rewardByHarness).map(([h, r]) => `${h} ${r.toFixed(3)}`).join(", ") || "none"}`,
    `${s.groupsShipped} groups, ${s.trajectoriesShipped} trajectories shipped; ${s.droppedEnvErrors} dropped after env-error retries; ${s.retries} retries; over length: ${s.overLength.dropped} dropped, ${s.overLength.truncated} truncated`,
    `statuses: ${kv(s.statuses)}; by harness: ${Object.entries(s.statusesByHarness).map(([h, v]) => `${h} (${kv(v)})`).join("; ") || "none"}`,
    `failures: ${kv(s.failures)}; env errors over all attempts: ${kv(s.envErrors)}; defense flags: ${kv(s.defenseFlags)}`,
    `tokens: ${s.tokens.prompt} prompt, ${s.tokens.completion} completion, ${s.tokens.trainable} trainable; tool-call parse failures ${s.toolCallParseFailures} (rate ${s.toolCallParseFailureRate})`,
    `policy versions ${s.policyVersions ? `${s.policyVersions.min}..${s.policyVersions.max}` : "none"}; ${s.overStalenessBound} shipped stale (over --max-staleness); paused for staleness ${s.pausedForStaleness} time(s)`,
    `throughput: ${s.throughput.rolloutsPerMin} rollouts/min, ${s.throughput.trajectoriesPerMin} trajectories/min over ${s.wallS} s; per rollout: setup ${s.stageS.setup} s, agent ${s.stageS.agent} s, grading ${s.stageS.grading} s`,
  ].join("\n");
}

/** One JSON line per event (the log when stdout is not a terminal). */
export function jsonLines(events: RolloutEvents, write: (line: string) => void): () => void {
  return events.subscribe((e) => write(`${JSON.stringify({ event: e.kind, ...e, kind: undefined })}\n`));
}
