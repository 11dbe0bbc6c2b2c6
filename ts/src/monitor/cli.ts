/**
 * `lego monitor replay STEP_LOG`: run a trainer step log through the monitor and print each
 * alert as one JSON line (and append it to --alert-log). A live monitor attached to a running
 * trainer is not built yet, so `lego monitor` without a subcommand still refuses with the
 * not-built exit code; the Live UI over a run folder is `lego ui` (ts/src/ui).
 */
import type { Argv } from "yargs";
import { ComponentNotBuiltError, type LegoCommand } from "../lego-command.ts";
import { Monitor } from "./monitor.ts";
import { monitorStepLog } from "./step-log.ts";

export const monitorCommand: LegoCommand = {
  command: "monitor [args..]",
  describe: "replay a trainer step log through the alert monitor (the Live UI is `lego ui`)",
  builder: (y: Argv) =>
    y
      .command(
        "replay <step-log>",
        "print the alerts a trainer step log (steps.jsonl) raises, one JSON object per line",
        (b) =>
          b
            .positional("step-log", { type: "string", demandOption: true })
            .option("alert-log", { type: "string", describe: "also append each alert to this JSON-lines file" }),
        (a) => {
          const alerts = monitorStepLog(new Monitor({ onAlert: (al) => process.stdout.write(`${JSON.stringify(al)}\n`) }),
            a["step-log"] as string, a["alert-log"] as string | undefined);
          process.stderr.write(`monitor: ${alerts.length} alert(s)\n`);
        },
      )
      .strict(false),
  handler: () => {
    throw new ComponentNotBuiltError("monitor", "observability: a live monitor attached to a running trainer; the Live UI over a run folder is `lego ui`");
  },
};
