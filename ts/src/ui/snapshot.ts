/**
 * What the Live UI shows, computed from a RunView: the run's status, per-step and per-batch
 * series for the curves, alerts, one summary row per trajectory, and one trajectory in full
 * (turn by turn, token by token). Plain JSON so the page and the SSE stream carry it as is.
 */
import { batchSignal, type Alert, type Signal } from "../monitor/index.ts";
import type { RunView } from "../mcp/index.ts";
import type { Trajectory } from "../schema/index.ts";
import type { TokenText, TurnMessage } from "./text.ts";

export interface TrajectorySummary {
  id: string;
  task: string;
  harness: string;
  status: string;
  reward: number | null;
  flags: string[];
  /** Lowest and highest policy version over the trajectory's turns; null without turns. */
  policyVersions: [number, number] | null;
  turns: number;
  toolCalls: number;
  /** Index (spool order) of the batch it was spooled in. */
  batch: number;
}

export interface RunSnapshot {
  runDir: string;
  status: { steps: number; latestStep: number | null; batches: number; trajectories: number; alerts: number };
  steps: { step: number; signal: Signal }[];
  /** One point per spooled batch, in spool order (`index`; producers number `seq` their own way): the monitor's batch signal plus reward and behaviour means. */
  batches: { index: number; seq: number; batchId: string; signal: Signal }[];
  alerts: Alert[];
  trajectories: TrajectorySummary[];
  /** A second run's curves, drawn beside this one's (`lego ui --compare-dir`). */
  compare: { runDir: string; steps: RunSnapshot["steps"]; batches: RunSnapshot["batches"] } | null;
}

const mean = (xs: number[]) => (xs.length === 0 ? undefined : xs.reduce((a, b) => a + b, 0) / xs.length);

function policyVersions(t: Trajectory): [number, number] | null {
  const vs = t.segments.flatMap((s) => s.turns.map((x) => x.policy_version));
  return vs.length === 0 ? null : [Math.min(...vs), Math.max(...vs)];
}

function batchPoint(trajectories: Trajectory[]): Signal {
  const turns = trajectories.reduce((a, t) => a + t.metrics.turns, 0);
  return {
    ...batchSignal(trajectories),
    "reward/mean": mean(trajectories.flatMap((t) => (t.reward === null ? [] : [t.reward]))),
    // Self-verification: re-reads of a just-edited file per turn (the paper's behaviour signal).
    "behaviour/rereads_per_turn": turns > 0 ? trajectories.reduce((a, t) => a + t.metrics.rereads_after_edit, 0) / turns : undefined,
  };
}

function stepPoint(signal: Signal): Signal {
  const tokens = signal["batch/tokens"];
  const seconds = signal["time/step_s"];
  return tokens !== undefined && seconds !== undefined && seconds > 0 ? { ...signal, "throughput/tokens_per_s": tokens / seconds } : signal;
}

export function runSnapshot(runDir: string, view: RunView, compare?: { runDir: string; view: RunView }): RunSnapshot {
  const steps = view.steps().map((s) => ({ step: s.step, signal: stepPoint(s.signal) }));
  const batches = view.batches();
  const alerts = view.alerts();
  const trajectories = batches.flatMap((b, index) => b.trajectories.map((t): TrajectorySummary => ({
    id: t.trajectory_id, task: t.task_id, harness: t.harness, status: t.status, reward: t.reward, flags: t.defense_flags,
    policyVersions: policyVersions(t), turns: t.metrics.turns, toolCalls: t.metrics.tool_calls, batch: index,
  })));
  return {
    runDir,
    status: { steps: steps.length, latestStep: steps.at(-1)?.step ?? null, batches: batches.length, trajectories: trajectories.length, alerts: alerts.length },
    steps,
    batches: batches.map((b, index) => ({ index, seq: b.header.seq, batchId: b.header.batch_id, signal: batchPoint(b.trajectories) })),
    alerts,
    trajectories,
    compare: compare === undefined ? null : (({ steps: st, batches: bs }) => ({ runDir: compare.runDir, steps: st, batches: bs }))(runSnapshot(compare.runDir, compare.view)),
  };
}

/** A run of tokens: ids with their rollout logprob, loss mask and provenance (TokenProvenance). */
export interface TokenRun {
  ids: number[];
  logprobs: number[];
  lossMask: number[];
  provenance: number[];
  /** With a tokenizer (`lego ui --model-dir`): the run's text, and each token's own piece. */
  text?: string;
  pieces?: string[];
}

export interface TurnView {
  turnId: string;
  policyVersion: number;
  finishReason: string;
  /** Tokens added to the context since the previous completion (tool results, user text, template). */
  prompt: TokenRun;
  completion: TokenRun;
  /** With a tokenizer: the completion as the proxy's parser reads it (reasoning, content, tool calls). */
  message?: TurnMessage;
}

export interface TrajectoryView {
  summary: Omit<TrajectorySummary, "batch">;
  error: string | null;
  metrics: Trajectory["metrics"];
  segments: {
    id: string; thread: string; threadId: string; sealReason: string; turns: TurnView[];
    /** Tokens after the last completion (the end-of-turn template). */
    tail: TokenRun;
    /** Trainable tokens with the engine's recorded routing / all trainable tokens; null for dense models. */
    routingRecorded: [number, number] | null;
  }[];
}

export function trajectoryView(t: Trajectory, text?: TokenText): TrajectoryView {
  return {
    summary: { id: t.trajectory_id, task: t.task_id, harness: t.harness, status: t.status, reward: t.reward, flags: t.defense_flags,
      policyVersions: policyVersions(t), turns: t.metrics.turns, toolCalls: t.metrics.tool_calls },
    error: t.error,
    metrics: t.metrics,
    segments: t.segments.map((s) => {
      const run = (a: number, b: number): TokenRun => {
        const ids = Array.from(s.token_ids.subarray(a, b));
        const r: TokenRun = { ids, logprobs: Array.from(s.logprobs.subarray(a, b)), lossMask: Array.from(s.loss_mask.subarray(a, b)), provenance: Array.from(s.provenance.subarray(a, b)) };
        if (text !== undefined) { r.text = text.decode(ids); r.pieces = text.pieces(ids); }
        return r;
      };
      let end = 0;
      const turns = s.turns.map((x): TurnView => {
        const v: TurnView = { turnId: x.turn_id, policyVersion: x.policy_version, finishReason: x.finish_reason, prompt: run(end, x.completion_start), completion: run(x.completion_start, x.completion_end) };
        if (text !== undefined) v.message = text.message(v.completion.text!);
        end = x.completion_end;
        return v;
      });
      let trainable = 0, recorded = 0;
      for (let i = 0; i < s.loss_mask.length; i++) if (s.loss_mask[i] === 1) { trainable++; recorded += s.routing_recorded?.[i] === 1 ? 1 : 0; }
      return { id: s.segment_id, thread: s.thread, threadId: s.thread_id, sealReason: s.seal_reason, turns, tail: run(end, s.token_ids.length),
        routingRecorded: s.routing_recorded === null ? null : [recorded, trainable] };
    }),
  };
}
