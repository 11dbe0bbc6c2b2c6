/** Each alert fires on a crafted step/batch stream and stays silent on a healthy run. */
import { describe, expect, it } from "vitest";
import { type AlertKind, Monitor, type Signal } from "./index.ts";

const healthy = (i: number): Signal => ({
  "optim/lr": 1e-5, "optim/grad_norm": 0.5 + 0.01 * (i % 3), "mismatch/k3_kl": 0.01 + 0.001 * (i % 2),
  "mismatch/pearson_prob": 0.995, "routing/coverage": 1, "batch/token_misalignment": 0,
  "reward/flag_rate": 0, "tools/parse_failure_rate": 0.01, "tools/calls_per_turn": 1.5 + 0.1 * (i % 2),
  "episode/turns": 6, "episode/response_tokens": 800 + (i % 5) * 10, "episode/env_error_rate": 0.01,
  "batch/staleness_max": 1,
});

const run = (n: number, override: (i: number) => Signal = () => ({})) => {
  const seen: AlertKind[] = [];
  const m = new Monitor({ onAlert: (a) => seen.push(a.kind) });
  for (let i = 0; i < n; i++) m.observe(i, { ...healthy(i), ...override(i) });
  return { m, seen };
};

const faults: [AlertKind, (i: number) => Signal][] = [
  ["lr_zero", (i) => (i === 15 ? { "optim/lr": 0 } : {})],
  ["no_gradient", (i) => (i > 10 ? { "optim/grad_norm": 0 } : {})],
  ["grad_norm_spike", (i) => (i === 15 ? { "optim/grad_norm": 40 } : {})],
  ["k3_kl_rising", (i) => (i > 10 ? { "mismatch/k3_kl": 0.01 * 1.5 ** (i - 10) } : {})],
  ["prob_correlation_low", (i) => (i > 10 ? { "mismatch/pearson_prob": 0.9 } : {})],
  ["routing_coverage_low", (i) => (i === 12 ? { "routing/coverage": 0.97 } : {})],
  ["token_misalignment", (i) => (i === 12 ? { "batch/token_misalignment": 3 } : {})],
  ["reward_hack_rate", (i) => (i > 10 ? { "reward/flag_rate": 0.2 } : {})],
  ["tool_parse_failures", (i) => (i > 10 ? { "tools/parse_failure_rate": 0.3 } : {})],
  ["tool_calls_collapsing", (i) => (i > 10 ? { "tools/calls_per_turn": Math.max(0.05, 1.5 - 0.2 * (i - 10)) } : {})],
  ["turns_collapsing", (i) => (i > 10 ? { "episode/turns": 1 } : {})],
  ["response_length_drift", (i) => (i > 10 ? { "episode/response_tokens": 800 * 1.4 ** (i - 10) } : {})],
  ["env_error_spike", (i) => (i > 10 ? { "episode/env_error_rate": 0.5 } : {})],
  ["staleness_beyond_bound", (i) => (i === 12 ? { "batch/staleness_max": 5 } : {})],
];

describe("monitor", () => {
  it("stays silent on a healthy run", () => {
    const { seen } = run(200);
    expect(seen).toEqual([]);
  });

  it("covers every default rule with a fault test", () => {
    expect(new Set(faults.map(([k]) => k))).toEqual(new Set(new Monitor().rules.map((r) => r.kind)));
  });

  for (const [kind, fault] of faults) {
    it(`raises ${kind} with threshold, window and advice`, () => {
      const { m, seen } = run(30, fault);
      expect(seen).toContain(kind);
      const a = m.alerts.find((x) => x.kind === kind)!;
      expect(a.window).toBeGreaterThan(0);
      expect(a.message).toContain(kind);
      expect(a.message.length).toBeGreaterThan(40);
      // A single bad signal raises only its own alert.
      expect(new Set(seen)).toEqual(new Set([kind]));
    });
  }

  it("fires once per episode of breach and re-arms after recovery", () => {
    const { seen } = run(40, (i) => ((i > 5 && i < 12) || i > 30 ? { "reward/flag_rate": 0.5 } : {}));
    expect(seen.filter((k) => k === "reward_hack_rate")).toHaveLength(2);
  });

  it("ignores non-finite and missing metrics instead of alerting", () => {
    const m = new Monitor();
    expect(m.observe(0, { "optim/grad_norm": Number.NaN })).toEqual([]);
    expect(m.observe(1, {})).toEqual([]);
  });
});
