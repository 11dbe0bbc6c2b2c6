import { join } from "node:path";
import type { Argv, CommandModule } from "yargs";
import { REPO_ROOT } from "../repo-root.ts";
import { runPartialLoop } from "./partial-loop.ts";
import { runRlLoop } from "./rl-loop.ts";
import { HARNESS_TOOLS } from "../harness/index.ts";
import { DEFAULT_LOOP, HARNESS_LOOP, runRealLoop } from "./real-loop.ts";
import { evaluateHeldOut } from "./evaluate.ts";
import { DEMO_TASKS, EVAL_TASKS, defaultCacheRoot, ensureDemonstrations, warmStart } from "./warm-start.ts";

interface DemoArgs {
  "work-dir": string;
  steps?: number;
  "schema-only": boolean;
  toy: boolean;
  "group-size"?: number;
  concurrency?: number;
  lr: number;
  "loss-aggregation": "sequence_mean" | "token_sum_norm";
  "warmup-steps": number;
  "trainable-parameters"?: string;
  harness: string;
  tasks: string;
  ui: boolean;
  "sft-lr": number;
  "sft-batch": number;
  seed: number;
  "eval-k"?: number;
  "warm-start-only": boolean;
  "sft-steps"?: number;
  "sft-stop-at": number;
  "demo-tasks": string;
  "eval-only"?: string;
  "eval-tasks": string;
}

/** `--trainable-parameters`: "all" lifts the default's restriction; anything else is the trainer's regular expression. */
function trainableFrom(flag: string | undefined, fallback: string | null): string | null {
  if (flag === undefined) return fallback;
  return flag === "all" ? null : flag;
}

export const demoCommand: CommandModule<object, DemoArgs> = {
  command: "demo",
  describe: "the whole loop on the embedded defaults: warm start, held-out eval, GSPO in real harness sandboxes, eval again, report",
  builder: (yargs: Argv) =>
    yargs
      .option("work-dir", { type: "string", default: join(REPO_ROOT, "var/demo"), describe: "where the model, checkpoints and logs go" })
      .option("harness", { type: "string", default: DEFAULT_LOOP.harness, describe: `the harness of the GSPO rollouts and the evaluations: ${Object.keys(HARNESS_TOOLS).join(", ")}` })
      .option("tasks", { type: "string", default: DEFAULT_LOOP.tasks, describe: "task source of the GSPO rollouts (its first --steps tasks, one group each)" })
      .option("steps", { type: "number", describe: `GSPO steps, one task group each (default ${DEFAULT_LOOP.steps}; ${HARNESS_LOOP.steps} with another --harness)` })
      .option("group-size", { type: "number", describe: `rollouts per task group (default ${DEFAULT_LOOP.groupSize}; ${HARNESS_LOOP.groupSize} with another --harness)` })
      .option("concurrency", { type: "number", describe: `rollouts in flight (default ${DEFAULT_LOOP.concurrency}; ${HARNESS_LOOP.concurrency} with another --harness)` })
      .option("ui", { type: "boolean", default: DEFAULT_LOOP.ui, describe: "serve the Live UI over the run folder while the run lasts and print its address (--no-ui: do not)" })
      .option("lr", { type: "number", default: DEFAULT_LOOP.lr, describe: "GSPO learning rate" })
      .option("loss-aggregation", { choices: ["sequence_mean", "token_sum_norm"] as const, default: DEFAULT_LOOP.lossAggregation, describe: "how GSPO adds token losses up (docs/demo.md says why token_sum_norm)" })
      .option("warmup-steps", { type: "number", default: DEFAULT_LOOP.warmupSteps, describe: "raise the GSPO learning rate linearly over the first N updates" })
      .option("trainable-parameters", { type: "string", describe: `GSPO updates only the parameters whose name matches this regular expression (default ${DEFAULT_LOOP.trainableParameters ?? "all"}; "all": every one, then lower --lr: every weight at 1e-3 collapsed the demo's policy, 3e-4 did not)` })
      .option("sft-lr", { type: "number", default: DEFAULT_LOOP.sftLr, describe: "warm-start learning rate" })
      .option("sft-batch", { type: "number", default: DEFAULT_LOOP.sftBatch, describe: "demonstrations per warm-start step" })
      .option("seed", { type: "number", default: DEFAULT_LOOP.seed, describe: "seed of the tiny model's initialisation and the warm start's demonstration order" })
      .option("eval-k", { type: "number", describe: `held-out samples per task (default ${DEFAULT_LOOP.eval.k}; ${HARNESS_LOOP.eval.k} with another --harness)` })
      .option("toy", { type: "boolean", default: false, describe: "only GSPO on Ray on the built-in toy task (no harness, proxy or sandbox)" })
      .option("schema-only", { type: "boolean", default: false, describe: "only the TS -> Arrow -> Python schema round trip" })
      .option("warm-start-only", { type: "boolean", default: false, describe: "only the demonstrations (cached) and the supervised warm start" })
      .option("sft-steps", { type: "number", describe: `supervised warm-start steps, a cap while --sft-stop-at is set; 0: none, the tiny model as initialised (default ${DEFAULT_LOOP.sftSteps}; ${HARNESS_LOOP.sftSteps} with another --harness)` })
      .option("sft-stop-at", { type: "number", default: DEFAULT_LOOP.sftStopAt ?? 0, describe: "stop the warm start once the demonstrations' mean whole-action probability reaches this (0: run every --sft-steps step)" })
      .option("eval-only", { type: "string", describe: "only the held-out evaluation of this model directory" })
      .option("eval-tasks", { type: "string", default: EVAL_TASKS, describe: "evaluation task source (its test split when it has one, else every task)" })
      .option("demo-tasks", { type: "string", default: DEMO_TASKS, describe: "task source of the demonstrations (disjoint from the evaluation seeds)" })
      .check((a) => {
        const harness = a.harness as string;
        if (!(harness in HARNESS_TOOLS)) throw new Error(`--harness ${harness}: unknown harness (known: ${Object.keys(HARNESS_TOOLS).join(", ")})`);
        const whole = (name: string, min: number) => {
          const v = a[name] as number | undefined;
          if (v !== undefined && (!Number.isInteger(v) || v < min)) throw new Error(`--${name} must be an integer >= ${min}, got ${v}`);
        };
        whole("steps", 1);
        whole("group-size", 2); // GSPO's baseline is the group's mean: one rollout alone has no advantage
        whole("concurrency", 1);
        whole("eval-k", 1);
        whole("sft-steps", 0);
        whole("sft-batch", 1);
        whole("warmup-steps", 0);
        for (const name of ["lr", "sft-lr"]) if (!((a[name] as number) > 0)) throw new Error(`--${name} must be a positive number, got ${a[name] as number}`);
        const stopAt = a["sft-stop-at"] as number;
        if (!(stopAt >= 0 && stopAt <= 1)) throw new Error(`--sft-stop-at must be a probability in [0, 1] (0: off), got ${stopAt}`);
        return true;
      }) as Argv<DemoArgs>,
  handler: async (args) => {
    if (args["eval-only"]) {
      // The demo's own evaluation settings, so a figure from here compares with the demo's before/after.
      const report = await evaluateHeldOut(args["eval-only"], { ...DEFAULT_LOOP.eval, k: args["eval-k"] ?? DEFAULT_LOOP.eval.k, tasks: args["eval-tasks"], harness: args.harness, split: "test" }, join(args["work-dir"], "eval.json"));
      console.log(JSON.stringify({ model_dir: args["eval-only"], tasks: report.source, held_out_tasks: report.tasks, k: report.k, pass1: report.pass1, statuses: report.statuses }));
      return;
    }
    if (args["warm-start-only"]) {
      const demos = await ensureDemonstrations({ cacheRoot: defaultCacheRoot(), tasks: args["demo-tasks"], log: (l) => console.log(l) });
      console.log(`demonstrations: ${demos.manifest.trajectories} from ${demos.manifest.tasks} (${demos.dir})`);
      const sft = warmStart({ workDir: args["work-dir"], demonstrations: demos.dir, steps: args["sft-steps"] ?? DEFAULT_LOOP.sftSteps, lr: args["sft-lr"], batch: args["sft-batch"], seed: args.seed, stopAt: args["sft-stop-at"] || undefined });
      console.log(`warm start: ${sft.steps} steps on ${sft.demonstrations} demonstrations, loss ${sft.loss_first.toFixed(3)} -> ${sft.loss_last.toFixed(3)} in ${sft.seconds.toFixed(0)} s; model ${sft.model_dir}`);
      return;
    }
    if (args["schema-only"]) {
      process.exitCode = runPartialLoop({ spoolDir: join(args["work-dir"], "spool"), groupSize: 4, groups: 2 });
      return;
    }
    if (args.toy) {
      runRlLoop({ workDir: args["work-dir"], steps: args.steps ?? DEFAULT_LOOP.steps });
      return;
    }
    // Another harness: a shorter run by default (HARNESS_LOOP says why); a flag given wins in either mode.
    const base = args.harness === "reference" ? DEFAULT_LOOP : HARNESS_LOOP;
    const summary = await runRealLoop({
      ...base, workDir: args["work-dir"], harness: args.harness, tasks: args.tasks, ui: args.ui,
      steps: args.steps ?? base.steps, groupSize: args["group-size"] ?? base.groupSize, concurrency: args.concurrency ?? base.concurrency,
      lr: args.lr, lossAggregation: args["loss-aggregation"],
      warmupSteps: args["warmup-steps"], trainableParameters: trainableFrom(args["trainable-parameters"], base.trainableParameters), sftSteps: args["sft-steps"] ?? base.sftSteps, sftStopAt: args["sft-stop-at"] || null, sftLr: args["sft-lr"], sftBatch: args["sft-batch"], seed: args.seed,
      demoTasks: args["demo-tasks"], evalTasks: args["eval-tasks"], eval: { ...base.eval, k: args["eval-k"] ?? base.eval.k }, log: (l) => console.log(l),
    });
    console.log(`report: ${summary.report}`);
    console.log(JSON.stringify(summary));
  },
};
