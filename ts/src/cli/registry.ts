// Registers the harness adapters with `lego eval --harness` (a side effect of importing it).
import "../harness/index.ts";
import { checkCommand } from "../check/index.ts";
import { demoCommand } from "../demo/cli.ts";
import { proxyCommand } from "../proxy/cli.ts";
import { rolloutCommand } from "../rollout/cli.ts";
import { sandboxCommand } from "../sandbox/cli.ts";
import { mcpCommand } from "../mcp/index.ts";
import { monitorCommand } from "../monitor/cli.ts";
import { evalCommand, tasksCommand } from "../tasks/cli.ts";
import { transportCommand } from "../transport/cli.ts";
import { uiCommand } from "../ui/index.ts";
import type { LegoCommand } from "../lego-command.ts";

/**
 * Every `lego` subcommand, in help order. A component replaces its pending
 * entry with the real command module exported from its folder's `cli.ts`.
 */
export function legoCommands(): LegoCommand[] {
  return [
    rolloutCommand,
    proxyCommand,
    sandboxCommand,
    tasksCommand,
    evalCommand,
    transportCommand,
    monitorCommand,
    mcpCommand,
    uiCommand,
    checkCommand,
    demoCommand,
  ];
}
