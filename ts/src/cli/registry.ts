import { demoCommand } from "../demo/cli.ts";
import { pendingCommand, type LegoCommand } from "./component.ts";

/**
 * Every `lego` subcommand, in help order. A component replaces its pending
 * entry with the real command module exported from its folder's `cli.ts`.
 */
export function legoCommands(): LegoCommand[] {
  return [
    pendingCommand("rollout", "run rollout workers against a trainer", "rollout worker"),
    pendingCommand("proxy", "serve the in-process LLM proxy on its own", "LLM proxy"),
    pendingCommand("sandbox", "build, check and manage Docker sandboxes", "sandboxes"),
    pendingCommand("transport", "send spools, tap addresses, print data-plane stats", "data plane"),
    pendingCommand("monitor", "serve the Live UI", "observability"),
    demoCommand,
  ];
}
