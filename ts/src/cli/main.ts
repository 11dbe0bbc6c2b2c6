#!/usr/bin/env node
import yargs from "yargs";
import { hideBin } from "yargs/helpers";
import { configureSandboxHost, sandboxHostFromEnv } from "../sandbox/index.ts";
import { ComponentNotBuiltError, EXIT_NOT_BUILT } from "./component.ts";
import { legoCommands } from "./registry.ts";

/** Builds the `lego` CLI; exported so tests can drive it without a process. */
export function buildCli(argv: string[]) {
  let cli = yargs(argv)
    .scriptName("lego")
    .strict()
    .demandCommand(1, "Name a subcommand; `lego --help` lists them.")
    .recommendCommands()
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
    throw error;
  }
}

if (import.meta.url === `file://${process.argv[1]}` || process.argv[1]?.endsWith("/bin/lego")) {
  await main();
}
