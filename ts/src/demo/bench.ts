/**
 * `pnpm bench:demo`: the demo (`lego demo`, the whole loop) as a benchmark.
 * Runs it with the demo's defaults unless flags say otherwise
 * (`pnpm bench:demo --steps 8 --work-dir /tmp/demo`); the last line is
 * {"bench":"demo","reward_gain":…,"min_pearson":…,"minutes":…}, with the
 * before/after held-out pass@1 beside it. The host's load average at the start
 * and the end goes in too: on a shared machine the minutes mean little without it.
 */
import { loadavg } from "node:os";
import { join } from "node:path";
import { BenchFlagError, benchFlags, positiveInt } from "../bench/index.ts";
import { REPO_ROOT } from "../repo-root.ts";
import { DEFAULT_LOOP, runRealLoop } from "./real-loop.ts";

const flags = benchFlags({
  steps: { default: String(DEFAULT_LOOP.steps), describe: "GSPO steps" },
  "group-size": { default: String(DEFAULT_LOOP.groupSize), describe: "rollouts per group" },
  "sft-steps": { default: String(DEFAULT_LOOP.sftSteps), describe: "warm-start steps" },
  seed: { default: String(DEFAULT_LOOP.seed), describe: "seed of the tiny model and the warm start (a second seed checks the gain is not one lucky run)" },
  "work-dir": { default: join(REPO_ROOT, "var/bench/demo"), describe: "run folder" },
});

function nonNegativeInt(name: string, raw: string | undefined): number {
  const n = Number(raw);
  if (raw === undefined || !Number.isInteger(n) || n < 0) throw new BenchFlagError(`--${name} must be an integer >= 0, got ${JSON.stringify(raw)}`);
  return n;
}

const loadStart = loadavg()[0]!;
const summary = await runRealLoop({
  ...DEFAULT_LOOP, workDir: flags["work-dir"]!, steps: positiveInt("steps", flags.steps), groupSize: positiveInt("group-size", flags["group-size"]),
  sftSteps: positiveInt("sft-steps", flags["sft-steps"]), seed: nonNegativeInt("seed", flags.seed), log: (l) => console.log(l),
});
console.log(JSON.stringify({
  bench: "demo", reward_before: summary.reward_before, reward_after: summary.reward_after,
  pass_at_k_before: summary.pass_at_k_before, pass_at_k_after: summary.pass_at_k_after, k: summary.k, updates: summary.updates,
  containers_left: summary.containers_left, seed: nonNegativeInt("seed", flags.seed), report: summary.report,
  load_start: loadStart, load_end: loadavg()[0], utc: new Date().toISOString(),
  reward_gain: summary.reward_gain, min_pearson: summary.min_pearson, minutes: summary.minutes,
}));
