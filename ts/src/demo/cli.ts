import { join } from "node:path";
import type { Argv, CommandModule } from "yargs";
import { REPO_ROOT } from "../schema/vectors.ts";
import { runPartialLoop } from "./partial-loop.ts";

interface DemoArgs {
  spool: string;
  "group-size": number;
  groups: number;
}

export const demoCommand: CommandModule<object, DemoArgs> = {
  command: "demo",
  describe: "run the most complete loop built so far on the embedded defaults",
  builder: (yargs: Argv) =>
    yargs
      .option("spool", { type: "string", default: join(REPO_ROOT, "var/demo/spool"), describe: "where batches are written" })
      .option("group-size", { type: "number", default: 4, describe: "rollouts per task group" })
      .option("groups", { type: "number", default: 2, describe: "task groups" }),
  handler: (args) => {
    process.exitCode = runPartialLoop({ spoolDir: args.spool, groupSize: args["group-size"], groups: args.groups });
  },
};
