import { join } from "node:path";
import type { Argv, CommandModule } from "yargs";
import { REPO_ROOT } from "../repo-root.ts";
import { runPartialLoop } from "./partial-loop.ts";
import { runRlLoop } from "./rl-loop.ts";
import { DEFAULT_EVAL, evaluateHeldOut } from "./evaluate.ts";
import { DEMO_TASKS, EVAL_TASKS, defaultCacheRoot, ensureDemonstrations, warmStart } from "./warm-start.ts";

interface DemoArgs {
  "work-dir": string;
  steps: number;
  "schema-only": boolean;
  "warm-start-only": boolean;
  "sft-steps": number;
  "demo-tasks": string;
  "eval-only"?: string;
  "eval-tasks": string;
}

export const demoCommand: CommandModule<object, DemoArgs> = {
  command: "demo",
  describe: "run the most complete loop built so far on the embedded defaults",
  builder: (yargs: Argv) =>
    yargs
      .option("work-dir", { type: "string", default: join(REPO_ROOT, "var/demo"), describe: "where the model, checkpoints and logs go" })
      .option("steps", { type: "number", default: 20, describe: "GSPO steps" })
      .option("schema-only", { type: "boolean", default: false, describe: "only the TS -> Arrow -> Python schema round trip" })
      .option("warm-start-only", { type: "boolean", default: false, describe: "only the demonstrations (cached) and the supervised warm start" })
      .option("sft-steps", { type: "number", default: 60, describe: "supervised warm-start steps" })
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
    runRlLoop({ workDir: args["work-dir"], steps: args.steps });
  },
};
