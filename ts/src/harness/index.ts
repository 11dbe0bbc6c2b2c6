/**
 * Harness adapters: one module per harness behind one interface (types.ts),
 * registered with `lego eval --harness NAME --engine E` on import.
 */
import { registerHarness } from "../tasks/index.ts";
import { harnessLauncherFor } from "./choose-engine.ts";
import type { ToolNames } from "./engines.ts";
import { claudeCodeHarness } from "./claude-code.ts";
import { openCodeHarness } from "./opencode.ts";
import { codexHarness } from "./codex.ts";
import { openHandsHarness } from "./openhands.ts";
import { miniSweAgentHarness } from "./mini-swe-agent.ts";
import { referenceHarness } from "./reference.ts";
import type { Harness } from "./types.ts";

export type { Harness, HarnessLimits, HarnessSession } from "./types.ts";
export {
  ANSWER_AT_ONCE, ENGINES, SIDE_REPLY, editScript, goldScript, HarnessEngineError, scriptedHarnessEngine, scriptedToolEngine, solveScript, toolCall, type ToolNames,
} from "./engines.ts";
export { goldSteps, goldPatchText, GoldPatchError, type GoldStep, type HunkLine } from "./gold-edits.ts";
export { applyPatchChanges, applyPatchCommand, codexPatch } from "./codex-patch.ts";
export { fileTouches, rereadsAfterEdit, type FileTools, type FileTouch, type PathTool, type ShellTool } from "./file-touches.ts";
export { proxiedLauncher, QWEN3_DIR, rolloutSession, SERVED_MODEL, type HarnessLauncher, type HarnessRollout, type ProxiedLauncherConfig } from "./launcher.ts";
export {
  canonicalJson, harnessReport, proxyToolCalls, readOwnRecord, RECORD_MAX_BYTES, toolCallMismatches,
  type HarnessRecordReader, type HarnessReport, type HarnessToolCall, type OwnRecord, type ToolCallRecord,
} from "./report.ts";
export { DEFAULT_POLICY_SAMPLING, isEngineAddress, PolicyEngine, PolicyEngineError, type PolicyEngineConfig, type PolicySampling } from "./policy-engine.ts";
export { referenceHarness } from "./reference.ts";
export { OPENCODE_VERSION, openCodeConfig, openCodeHarness } from "./opencode.ts";
export { CODEX_VERSION, codexConfig, codexHarness, shellWords } from "./codex.ts";
export { CLAUDE_CODE_TOOLS, CLAUDE_CODE_VERSION, claudeCodeHarness, RUNTIMES_DIR } from "./claude-code.ts";
export { OPENHANDS_SDK_VERSION, openHandsHarness } from "./openhands.ts";
export { PYTHON_VERSION } from "./python-runtime.ts";
export { MINI_SWE_AGENT_VERSION, miniSweAgentHarness } from "./mini-swe-agent.ts";

/** Per harness, the tool names its model uses for each job (what scripted engines call). */
export const HARNESS_TOOLS: Record<string, { harness: Harness; tools: ToolNames }> = {
  reference: {
    harness: referenceHarness,
    tools: {
      write: { name: "write_file", path: "path", content: "content" },
      edit: { name: "edit_file", path: "path", old: "old_str", new: "new_str" },
      shell: { name: "bash", command: "command" },
      submit: "submit",
    },
  },
  // Claude Code's own tool names and parameters (Anthropic tool_use); it ends on a plain answer.
  // 2.1.332 under -p --bare offers no Write tool even when --tools names it: Edit with an
  // empty old_string creates the file. replace_all is given: Claude Code echoes the call back with
  // its defaults filled in, and a call that comes back changed would split the segment. Its Edit
  // refuses a file not Read first ("File has not been read yet").
  "claude-code": {
    harness: claudeCodeHarness(),
    tools: {
      write: { name: "Edit", path: "file_path", content: "new_string", fixed: { replace_all: false, old_string: "" } },
      edit: { name: "Edit", path: "file_path", old: "old_string", new: "new_string", fixed: { replace_all: false } },
      readFirst: { name: "Read", path: "file_path" },
      shell: { name: "Bash", command: "command" },
    },
  },
  // OpenCode's own tools (write: filePath + content; edit: filePath, oldString, newString; bash needs a description); it ends on a plain answer.
  opencode: {
    harness: openCodeHarness(),
    tools: {
      write: { name: "write", path: "filePath", content: "content" },
      edit: { name: "edit", path: "filePath", old: "oldString", new: "newString" },
      shell: { name: "bash", command: "command", fixed: { description: "Apply the fix" } },
    },
  },
  // Codex CLI 0.171.0 offers a model it has no metadata for exec_command (unified exec) and no
  // apply_patch tool; its apply_patch is reached through exec_command (codex-patch.ts). It ends on a plain answer.
  codex: {
    harness: codexHarness(),
    tools: { shell: { name: "exec_command", command: "cmd" }, applyPatch: "shell" },
  },
  // OpenHands SDK: its file_editor (create, which makes no missing folder; str_replace) and terminal tools; it ends on its finish tool.
  openhands: {
    harness: openHandsHarness(),
    tools: {
      write: { name: "file_editor", path: "path", content: "file_text", fixed: { command: "create" }, makesParents: false },
      edit: { name: "file_editor", path: "path", old: "old_str", new: "new_str", fixed: { command: "str_replace" } },
      shell: { name: "terminal", command: "command" },
      submit: { name: "finish", args: { message: "Done: the fix is applied." } },
    },
  },
  // mini-swe-agent: bash only (files written through it); it submits with its own echo command.
  "mini-swe-agent": {
    harness: miniSweAgentHarness(),
    tools: { shell: { name: "bash", command: "command" }, submit: { name: "bash", args: { command: "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" } } },
  },
};

for (const [name, { harness, tools }] of Object.entries(HARNESS_TOOLS)) registerHarness(name, (opts) => harnessLauncherFor(harness, tools, opts));
