/** `lego mcp --run-dir DIR`: the run MCP server on stdio, for Claude Code / OpenCode. */
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import type { Argv } from "yargs";
import type { LegoCommand } from "../lego-command.ts";
import { runDirView } from "./run-dir.ts";
import { runServer } from "./server.ts";

export const mcpCommand: LegoCommand = {
  command: "mcp",
  describe: "MCP server on stdio exposing a run's status, alerts, metrics and trajectories",
  builder: (y: Argv) => y.option("run-dir", { type: "string", demandOption: true, describe: "folder with steps.jsonl and spool/" }),
  handler: async (a) => {
    await runServer(runDirView(a["run-dir"] as string)).connect(new StdioServerTransport());
  },
};
