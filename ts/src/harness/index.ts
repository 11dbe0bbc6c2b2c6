/**
 * Harness adapters: one module per harness behind one interface (types.ts),
 * registered with `lego eval --harness NAME --engine E` on import.
 */
import { registerHarness } from "../tasks/agents.ts";
import { ENGINES, HarnessEngineError, scriptedHarnessEngine, type ToolNames } from "./engines.ts";
import { proxiedLauncher } from "./launcher.ts";
import { claudeCodeHarness } from "./claude-code.ts";
import { openCodeHarness } from "./opencode.ts";
import { codexHarness } from "./codex.ts";
import { referenceHarness } from "./reference.ts";
import type { Harness } from "./types.ts";

export type { Harness, HarnessLimits, HarnessSession } from "./types.ts";
export { ANSWER_AT_ONCE, ENGINES, SIDE_REPLY, goldScript, HarnessEngineError, scriptedHarnessEngine, toolCall, type ToolNames } from "./engines.ts";
export { proxiedLauncher, QWEN3_DIR, SERVED_MODEL, type ProxiedLauncherConfig } from "./launcher.ts";
export { referenceHarness } from "./reference.ts";
export { OPENCODE_VERSION, openCodeConfig, openCodeHarness } from "./opencode.ts";
export { CODEX_VERSION, codexConfig, codexHarness } from "./codex.ts";
export { CLAUDE_CODE_TOOLS, CLAUDE_CODE_VERSION, claudeCodeHarness, RUNTIMES_DIR } from "./claude-code.ts";

/** Per harness, the tool names its model uses for each job (what scripted engines call). */
export const HARNESS_TOOLS: Record<string, { harness: Harness; tools: ToolNames }> = {
  reference: {
    harness: referenceHarness,
    tools: { write: { name: "write_file", path: "path", content: "content" }, shell: { name: "bash", command: "command" }, submit: "submit" },
  },
  // Claude Code's own tool names and parameters (Anthropic tool_use); it ends on a plain answer.
  // 2.1.332 under -p --bare offers no Write tool even when --tools names it: Edit with an
  // empty old_string creates the file. replace_all is given: Claude Code echoes the call back with
  // its defaults filled in, and a call that comes back changed would split the segment.
  "claude-code": {
    harness: claudeCodeHarness(),
    tools: { write: { name: "Edit", path: "file_path", content: "new_string", fixed: { replace_all: false, old_string: "" } }, shell: { name: "Bash", command: "command" } },
  },
  // OpenCode's own tools (write: filePath + content; bash needs a description); it ends on a plain answer.
  opencode: {
    harness: openCodeHarness(),
    tools: { write: { name: "write", path: "filePath", content: "content" }, shell: { name: "bash", command: "command", fixed: { description: "Apply the fix" } } },
  },
  // Codex CLI 0.171.0 offers a model it has no metadata for exec_command (unified exec) and no
  // apply_patch: the gold files are written through the shell. It ends on a plain answer.
  codex: {
    harness: codexHarness(),
    tools: { shell: { name: "exec_command", command: "cmd" } },
  },
};

for (const [name, { harness, tools }] of Object.entries(HARNESS_TOOLS)) {
  registerHarness(name, async ({ engine }) => {
    if (!(ENGINES as readonly string[]).includes(engine))
      throw new HarnessEngineError(`--engine ${JSON.stringify(engine)}: unknown engine for harness ${name} (known: ${ENGINES.join(", ")})`);
    return proxiedLauncher({ harness, engineName: engine, engine: (model, def) => scriptedHarnessEngine(engine, model, def, tools) });
  });
}
