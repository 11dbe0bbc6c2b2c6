import type { Argv, CommandModule } from "yargs";

/**
 * A component's contribution to the `lego` CLI. Each component folder exports
 * one of these from its `cli.ts`; `cli/registry.ts` lists them in one place. It
 * lives below both, so a component never imports from `cli/`.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- each command types its own arguments
export type LegoCommand = CommandModule<any, any>;

/** Exit code for "this component is not built yet" (see `pendingCommand`). */
export const EXIT_NOT_BUILT = 2;

export class ComponentNotBuiltError extends Error {
  constructor(
    readonly command: string,
    readonly issue: string,
  ) {
    super(
      `'lego ${command}' is not available yet: its component (${issue}) has not been built. ` +
        `Nothing was run.`,
    );
    this.name = "ComponentNotBuiltError";
  }
}

/**
 * A placeholder for a subcommand whose component does not exist yet. It
 * refuses with exit code 2 and a clear message rather than printing fake output.
 */
export function pendingCommand(command: string, describe: string, issue: string): LegoCommand {
  return {
    command: `${command} [args..]`,
    describe: `${describe} (not built yet)`,
    builder: (yargs: Argv) => yargs.strict(false),
    handler: () => {
      throw new ComponentNotBuiltError(command, issue);
    },
  };
}
