#!/usr/bin/env node
import yargs from "yargs";
import { hideBin } from "yargs/helpers";
import { TaskFormatError, configureSandboxHost, sandboxHostFromEnv } from "../sandbox/index.ts";
import { ComponentNotBuiltError, EXIT_NOT_BUILT } from "../lego-command.ts";
import { legoCommands } from "./registry.ts";

/** Builds the `lego` CLI; exported so tests can drive it without a process. */
export function buildCli(argv: string[]) {
  let cli = yargs(argv)
    .scriptName("lego")
    .strict()
    .demandCommand(1, "Name a subcommand; `lego --help` lists them.")
    .recommendCommands()
    .option("verbose", { type: "boolean", default: false, describe: "On an error, print its stack trace too" })
    .help()
    .fail((message, error, y) => {
      if (error) throw error;
      console.error(message ?? "invalid arguments");
      console.error(y.help());
      process.exit(1);
    });
  for (const command of legoCommands()) cli = cli.command(command);
  return cli;
}

async function main(): Promise<void> {
  // The one place the CLI reads the environment: settings, not behaviour switches.
  configureSandboxHost(sandboxHostFromEnv(process.env));
  try {
    await buildCli(hideBin(process.argv)).parseAsync();
  } catch (error) {
    if (error instanceof ComponentNotBuiltError) {
      console.error(`lego: ${error.message}`);
      process.exit(EXIT_NOT_BUILT);
    }
    // Read from argv, not yargs: the error may come from parsing itself.
    console.error(userErrorLine(error, process.argv.includes("--verbose")));
    process.exit(1);
  }
}

/**
 * One line naming what is wrong and what to do; the stack only with --verbose.
 * Errors that carry their own remedy (SandboxEnvError's hint) say it in their
 * message; the rest point at the trace.
 */
export function userErrorLine(error: unknown, verbose: boolean): string {
  if (verbose) return `lego: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`;
  const message = (error instanceof Error ? error.message : String(error)).split("\n")[0]!.trim();
  const remedy = error instanceof TaskFormatError
    ? "check the task folder's path and files (docs/tasks.md), or add --verbose for the stack trace"
    : "add --verbose for the stack trace";
  return message.includes(" — ") ? `lego: ${message}` : `lego: ${message} — ${remedy}`;
}

if (import.meta.url === `file://${process.argv[1]}` || process.argv[1]?.endsWith("/bin/lego")) {
  await main();
}
