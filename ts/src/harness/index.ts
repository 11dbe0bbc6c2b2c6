/**
 * Harness adapters: one module per harness behind one interface (types.ts),
 * registered with `lego eval --harness NAME --engine E` on import.
 */
import { registerHarness } from "../tasks/agents.ts";
import { ENGINES, HarnessEngineError, scriptedHarnessEngine, type ToolNames } from "./engines.ts";
import { proxiedLauncher } from "./launcher.ts";
import { referenceHarness } from "./reference.ts";
import type { Harness } from "./types.ts";

export type { Harness, HarnessLimits, HarnessSession } from "./types.ts";
export { ANSWER_AT_ONCE, ENGINES, goldScript, HarnessEngineError, scriptedHarnessEngine, toolCall, type ToolNames } from "./engines.ts";
export { proxiedLauncher, QWEN3_DIR, SERVED_MODEL, type ProxiedLauncherConfig } from "./launcher.ts";
export { referenceHarness } from "./reference.ts";

/** Per harness, the tool names its model uses for each job (what scripted engines call). */
export const HARNESS_TOOLS: Record<string, { harness: Harness; tools: ToolNames }> = {
  reference: {
    harness: referenceHarness,
    tools: { write: { name: "write_file", path: "path", content: "content" }, shell: { name: "bash", command: "command" }, submit: "submit" },
  },
};

for (const [name, { harness, tools }] of Object.entries(HARNESS_TOOLS)) {
  registerHarness(name, async ({ engine }) => {
    if (!(ENGINES as readonly string[]).includes(engine))
      throw new HarnessEngineError(`--engine ${JSON.stringify(engine)}: unknown engine for harness ${name} (known: ${ENGINES.join(", ")})`);
    return proxiedLauncher({ harness, engineName: engine, engine: (model, def) => scriptedHarnessEngine(engine, model, def, tools) });
  });
}
