import { join } from "node:path";
import type { Argv, CommandModule } from "yargs";
import { REPO_ROOT } from "../repo-root.ts";
import { runPartialLoop } from "./partial-loop.ts";
import { runRlLoop } from "./rl-loop.ts";
import { DEFAULT_LOOP, runRealLoop } from "./real-loop.ts";
import { DEFAULT_EVAL, evaluateHeldOut } from "./evaluate.ts";
import { DEMO_TASKS, EVAL_TASKS, defaultCacheRoot, ensureDemonstrations, warmStart } from "./warm-start.ts";

interface DemoArgs {
  "work-dir": string;
  steps: number;
  "schema-only": boolean;
  toy: boolean;
  "group-size": number;
  concurrency: number;
  lr: number;
  "sft-lr": number;
  "eval-k": number;
  "warm-start-only": boolean;
  "sft-steps": number;
  "demo-tasks": string;
  "eval-only"?: string;
  "eval-tasks": string;
}

export const demoCommand: CommandModule<object, DemoArgs> = {
  command: "demo",
  describe: "the whole loop on the embedded defaults: warm start, held-out eval, GSPO in real harness sandboxes, eval again, report",
  builder: (yargs: Argv) =>
    yargs
      .option("work-dir", { type: "string", default: join(REPO_ROOT, "var/demo"), describe: "where the model, checkpoints and logs go" })
      .option("steps", { type: "number", default: DEFAULT_LOOP.steps, describe: "GSPO steps (one task group each)" })
      .option("group-size", { type: "number", default: DEFAULT_LOOP.groupSize, describe: "rollouts per task group" })
      .option("concurrency", { type: "number", default: DEFAULT_LOOP.concurrency, describe: "rollouts in flight" })
      .option("lr", { type: "number", default: DEFAULT_LOOP.lr, describe: "GSPO learning rate" })
      .option("sft-lr", { type: "number", default: DEFAULT_LOOP.sftLr, describe: "warm-start learning rate" })
      .option("eval-k", { type: "number", default: DEFAULT_LOOP.eval.k, describe: "held-out samples per task" })
      .option("toy", { type: "boolean", default: false, describe: "only GSPO on Ray on the built-in toy task (no harness, proxy or sandbox)" })
      .option("schema-only", { type: "boolean", default: false, describe: "only the TS -> Arrow -> Python schema round trip" })
      .option("warm-start-only", { type: "boolean", default: false, describe: "only the demonstrations (cached) and the supervised warm start" })
      .option("sft-steps", { type: "number", default: DEFAULT_LOOP.sftSteps, describe: "supervised warm-start steps" })
      .option("eval-only", { type: "string", describe: "only the held-out evaluation of this model directory" })
      .option("eval-tasks", { type: "string", default: EVAL_TASKS, describe: "evaluation task source (its test split is used)" })
      .option("demo-tasks", { type: "string", default: DEMO_TASKS, describe: "task source of the demonstrations (disjoint from the evaluation seeds)" }) as Argv<DemoArgs>,
  handler: async (args) => {
    if (args["eval-only"]) {
      const report = await evaluateHeldOut(args["eval-only"], { ...DEFAULT_EVAL, tasks: args["eval-tasks"] }, join(args["work-dir"], "eval.json"));
      console.log(JSON.stringify({ model_dir: args["eval-only"], tasks: report.source, held_out_tasks: report.tasks, k: report.k, pass1: report.pass1, statuses: report.statuses }));
      return;
    }
    if (args["warm-start-only"]) {
      const demos = await ensureDemonstrations({ cacheRoot: defaultCacheRoot(), tasks: args["demo-tasks"], log: (l) => console.log(l) });
      console.log(`demonstrations: ${demos.manifest.trajectories} from ${demos.manifest.tasks} (${demos.dir})`);
      const sft = warmStart({ workDir: args["work-dir"], demonstrations: demos.dir, steps: args["sft-steps"] });
      console.log(`warm start: ${sft.steps} steps on ${sft.demonstrations} demonstrations, loss ${sft.loss_first.toFixed(3)} -> ${sft.loss_last.toFixed(3)} in ${sft.seconds.toFixed(0)} s; model ${sft.model_dir}`);
      return;
    }
    if (args["schema-only"]) {
      process.exitCode = runPartialLoop({ spoolDir: join(args["work-dir"], "spool"), groupSize: 4, groups: 2 });
      return;
    }
    if (args.toy) {
      runRlLoop({ workDir: args["work-dir"], steps: args.steps });
      return;
    }
    const summary = await runRealLoop({
      ...DEFAULT_LOOP, workDir: args["work-dir"], steps: args.steps, groupSize: args["group-size"], concurrency: args.concurrency,
      lr: args.lr, sftSteps: args["sft-steps"], sftLr: args["sft-lr"], demoTasks: args["demo-tasks"], evalTasks: args["eval-tasks"],
      eval: { ...DEFAULT_LOOP.eval, k: args["eval-k"] }, log: (l) => console.log(l),
    });
    console.log(`report: ${summary.report}`);
    console.log(JSON.stringify(summary));
  },
};
