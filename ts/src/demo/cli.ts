import { join } from "node:path";
import type { Argv, CommandModule } from "yargs";
import { REPO_ROOT } from "../repo-root.ts";
import { runPartialLoop } from "./partial-loop.ts";
import { runRlLoop } from "./rl-loop.ts";

interface DemoArgs {
  "work-dir": string;
  steps: number;
  "schema-only": boolean;
}

export const demoCommand: CommandModule<object, DemoArgs> = {
  command: "demo",
  describe: "run the most complete loop built so far on the embedded defaults",
  builder: (yargs: Argv) =>
    yargs
      .option("work-dir", { type: "string", default: join(REPO_ROOT, "var/demo"), describe: "where the model, checkpoints and logs go" })
      .option("steps", { type: "number", default: 20, describe: "GSPO steps" })
      .option("schema-only", { type: "boolean", default: false, describe: "only the TS -> Arrow -> Python schema round trip" }) as Argv<DemoArgs>,
  handler: (args) => {
    if (args["schema-only"]) {
      process.exitCode = runPartialLoop({ spoolDir: join(args["work-dir"], "spool"), groupSize: 4, groups: 2 });
      return;
    }
    runRlLoop({ workDir: args["work-dir"], steps: args.steps });
  },
};
