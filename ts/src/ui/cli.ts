/** `lego ui --run-dir DIR`: the Live UI over a run folder, on loopback with an access token. */
import type { Argv } from "yargs";
import type { LegoCommand } from "../lego-command.ts";
import { assetsBuilt, buildUiAssets, DEFAULT_ASSETS_DIR } from "./assets.ts";
import type { ToolCallFormat } from "../proxy/index.ts";
import { UiServer } from "./server.ts";
import { TokenText } from "./text.ts";

export const uiCommand: LegoCommand = {
  command: "ui",
  describe: "Live UI over a run folder (steps.jsonl, spool/): curves, alerts, trajectories down to tokens",
  builder: (y: Argv) =>
    y
      .option("run-dir", { type: "string", demandOption: true, describe: "folder with steps.jsonl and spool/" })
      .option("host", { type: "string", default: "127.0.0.1", describe: "interface to bind (loopback by default)" })
      .option("port", { type: "number", default: 8765, describe: "port (0: any free one)" })
      .option("assets-dir", { type: "string", describe: `built page to serve (default ${DEFAULT_ASSETS_DIR}, built when missing)` })
      .option("rebuild", { type: "boolean", default: false, describe: "build the page before serving even if it is there" })
      .option("poll-ms", { type: "number", default: 500, describe: "how often the run folder is checked for changes" })
      .option("compare-dir", { type: "string", describe: "a second run folder whose curves are drawn beside this run's" })
      .option("model-dir", { type: "string", describe: "the policy's tokenizer (as for `lego proxy`): show token text and parsed tool calls" })
      .option("tool-call-format", { choices: ["qwen3_json", "qwen3_coder_xml"] as const, default: "qwen3_json" as const, describe: "tool-call syntax of the policy's completions" }),
  handler: async (a) => {
    const assetsDir = (a["assets-dir"] as string | undefined) ?? DEFAULT_ASSETS_DIR;
    if (a.rebuild || !assetsBuilt(assetsDir)) {
      process.stderr.write(`lego ui: building the page into ${assetsDir}\n`);
      await buildUiAssets(assetsDir);
    }
    const modelDir = a["model-dir"] as string | undefined;
    const text = modelDir === undefined ? undefined : TokenText.fromModelDir(modelDir, a["tool-call-format"] as ToolCallFormat);
    const server = new UiServer({ runDir: a["run-dir"] as string, host: a.host as string, port: a.port as number, assetsDir, pollMs: a["poll-ms"] as number, text,
      compareDir: a["compare-dir"] as string | undefined });
    const url = await server.listen();
    process.stdout.write(`lego ui: ${url}\n`);
    const stop = () => void server.close().then(() => process.exit(0));
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  },
};
