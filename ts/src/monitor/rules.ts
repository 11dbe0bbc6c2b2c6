/**
 * Alert rules: each watches one signal over a sliding window of observations and fires
 * with a message that says what to check. Thresholds are data, so a run config can tune them.
 */
export type Signal = Record<string, number | undefined>;

export type AlertKind =
  | "lr_zero" | "no_gradient" | "grad_norm_spike" | "k3_kl_rising" | "prob_correlation_low"
  | "routing_coverage_low" | "token_misalignment" | "reward_hack_rate" | "tool_parse_failures"
  | "tool_calls_collapsing" | "turns_collapsing" | "response_length_drift" | "env_error_spike"
  | "staleness_beyond_bound";

export interface Alert {
  kind: AlertKind;
  /** Step (trainer) or batch sequence number (data plane) that tripped the rule. */
  at: number;
  value: number;
  threshold: number;
  window: number;
  message: string;
}

export interface Rule {
  kind: AlertKind;
  /** Metric key the rule reads; observations lacking it leave the rule untouched. */
  key: string;
  window: number;
  threshold: number;
  /** Returns the value that breached, or undefined while healthy. `history` ends with the newest value. */
  check(history: readonly number[], threshold: number): number | undefined;
  advice: string;
}

const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/** Mean of the window below the threshold. */
const meanBelow = (h: readonly number[], t: number) => (mean(h) < t ? mean(h) : undefined);
/** Mean of the window above the threshold. */
const meanAbove = (h: readonly number[], t: number) => (mean(h) > t ? mean(h) : undefined);
/** Newest value over `t` times the mean of the older ones. */
const spike = (h: readonly number[], t: number) => {
  const last = h[h.length - 1]!;
  const base = mean(h.slice(0, -1));
  return h.length > 1 && base > 0 && last > t * base ? last / base : undefined;
};
/** Newest value below `t` times the first one (a collapse over the window). */
const collapse = (h: readonly number[], t: number) => {
  const first = h[0]!;
  const last = h[h.length - 1]!;
  return first > 0 && last < t * first ? last / first : undefined;
};

export const defaultRules = (): Rule[] => [
  { kind: "lr_zero", key: "optim/lr", window: 1, threshold: 0, check: (h) => (h[h.length - 1]! <= 0 ? h[h.length - 1] : undefined),
    advice: "learning rate is zero: check the schedule's warm-up and total steps" },
  { kind: "no_gradient", key: "optim/grad_norm", window: 3, threshold: 1e-12, check: (h, t) => (Math.max(...h) < t ? Math.max(...h) : undefined),
    advice: "no gradient for several steps: check that the batch has trainable tokens and non-zero advantages (all-equal group rewards)" },
  { kind: "grad_norm_spike", key: "optim/grad_norm", window: 8, threshold: 10, check: spike,
    advice: "grad norm jumped against its recent mean: inspect the step's trajectories for extreme ratios; lower LR or tighten clipping" },
  { kind: "k3_kl_rising", key: "mismatch/k3_kl", window: 5, threshold: 2, check: (h, t) => (h.every((x, i) => i === 0 || x > h[i - 1]!) && h[0]! > 0 && h[h.length - 1]! > t * h[0]! ? h[h.length - 1] : undefined),
    advice: "k3 KL between rollout and trainer logprobs keeps rising: engine and trainer diverge; check weight sync, dtype and routing replay, or enable mismatch correction" },
  { kind: "prob_correlation_low", key: "mismatch/pearson_prob", window: 3, threshold: 0.98, check: meanBelow,
    advice: "rollout and trainer token probabilities disagree: check engine/trainer dtype, weight sync version and routing replay" },
  { kind: "routing_coverage_low", key: "routing/coverage", window: 1, threshold: 1, check: meanBelow,
    advice: "routing replay does not cover every MoE token: the engine must return expert ids for every generated token" },
  { kind: "token_misalignment", key: "batch/token_misalignment", window: 1, threshold: 0, check: meanAbove,
    advice: "segment tokens differ from the engine's returned tokens: the proxy re-tokenised text; keep token ids end to end" },
  { kind: "reward_hack_rate", key: "reward/flag_rate", window: 5, threshold: 0.05, check: meanAbove,
    advice: "graders flag reward hacking: open flagged trajectories (test edits, grader tampering) and harden the task" },
  { kind: "tool_parse_failures", key: "tools/parse_failure_rate", window: 5, threshold: 0.05, check: meanAbove,
    advice: "tool calls fail to parse: check the chat template vs the tool-call parser (`lego check`)" },
  { kind: "tool_calls_collapsing", key: "tools/calls_per_turn", window: 10, threshold: 0.3, check: collapse,
    advice: "tool calls per turn collapsed: the model stops acting; check rewards for no-tool answers and the parse failure rate" },
  { kind: "turns_collapsing", key: "episode/turns", window: 5, threshold: 1.2, check: meanBelow,
    advice: "episodes end after ~1 turn: check the harness loop and whether one-shot answers are rewarded" },
  { kind: "response_length_drift", key: "episode/response_tokens", window: 10, threshold: 3, check: (h, t) => {
      const r = h[h.length - 1]! / h[0]!;
      return h[0]! > 0 && (r > t || r < 1 / t) ? r : undefined;
    }, advice: "response length exploded or collapsed: check truncation, length penalties and the entropy trend" },
  { kind: "env_error_spike", key: "episode/env_error_rate", window: 5, threshold: 0.1, check: meanAbove,
    advice: "env_error rate high: check Docker health, sandbox limits and the harness runtime (`lego check`)" },
  { kind: "staleness_beyond_bound", key: "batch/staleness_max", window: 1, threshold: 2, check: meanAbove,
    advice: "trajectories are older than the staleness bound: the trainer is slower than rollout or weight sync stalls" },
];

