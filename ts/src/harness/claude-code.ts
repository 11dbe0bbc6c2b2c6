/**
 * Claude Code (npm @anthropic-ai/claude-code, its native binary), unmodified,
 * from the mounted harness runtime: `claude -p --bare` headless, its event
 * stream (stream-json) on stdout, pointed at the proxy session's Anthropic
 * Messages endpoint. --bare keeps out hooks, plugins, memory-file discovery and
 * keychain reads; the tool set is cut to what a coding task needs. Its own
 * record is that stream: `assistant` messages carry the tool_use blocks,
 * `user` messages their tool_result blocks, the `result` event its final answer.
 */
import { homedir } from "node:os";
import { join } from "node:path";
import type { AgentProgram, RuntimeMount, TaskDefinition } from "../sandbox/index.ts";
import type { FileTools } from "./file-touches.ts";
import { isObject, jsonLines, list, RECORD_MAX_BYTES, str, type HarnessRecordReader, type HarnessToolCall } from "./report.ts";
import { HARNESS_FILES_DIR, type Harness, type HarnessLimits, type HarnessSession } from "./types.ts";

export const CLAUDE_CODE_VERSION = "2.1.332";
/** Where set-up caches the runtimes (scripts/sandbox/build-runtimes.sh). */
export const RUNTIMES_DIR = join(homedir(), ".cache/lego-rl/runtimes");
/** Write is named too, though 2.1.332 under -p --bare leaves it out (Edit creates files). */
export const CLAUDE_CODE_TOOLS = ["Bash", "Read", "Write", "Edit"] as const;

/** CLAUDE_CODE_TOOLS as they touch files: each names its file by `file_path`. */
const FILE_TOOLS: FileTools = {
  paths: [
    { name: "Read", path: "file_path", touch: "read" },
    { name: "Edit", path: "file_path", touch: "edit" },
    { name: "Write", path: "file_path", touch: "edit" },
  ],
  shells: [{ name: "Bash", command: "command" }],
};

const DIR = HARNESS_FILES_DIR;
const BIN = "/opt/lego-runtimes/harness/node_modules/@anthropic-ai/claude-code-linux-x64/claude";
const EVENTS = "/tmp/lego-claude-events.jsonl";

/** The content blocks of a stream-json message event. */
const blocks = (e: Record<string, unknown>): Record<string, unknown>[] => list(isObject(e["message"]) ? e["message"]["content"] : undefined).filter(isObject);

/** stream-json: a tool_use counts as executed once a tool_result answers it (ok unless `is_error`). */
const record: HarnessRecordReader = {
  file: { path: EVENTS, maxBytes: RECORD_MAX_BYTES },
  parse(text) {
    const notes: string[] = [];
    const events = jsonLines(text, notes);
    const results = new Map<string, boolean>();
    for (const e of events.filter((e) => e["type"] === "user"))
      for (const b of blocks(e)) if (b["type"] === "tool_result" && str(b["tool_use_id"])) results.set(str(b["tool_use_id"])!, b["is_error"] !== true);
    const toolCalls: HarnessToolCall[] = [];
    for (const e of events.filter((e) => e["type"] === "assistant"))
      for (const b of blocks(e)) {
        const id = str(b["id"]);
        const name = str(b["name"]);
        if (b["type"] === "tool_use" && id && name && results.has(id)) toolCalls.push({ name, arguments: isObject(b["input"]) ? b["input"] : {}, ok: results.get(id)! });
      }
    const result = events.findLast((e) => e["type"] === "result");
    if (!result) notes.push("no `result` event: the stream ended before Claude Code finished");
    return { toolCalls, finalMessage: result ? str(result["result"]) : null, notes };
  },
};

export function claudeCodeHarness(runtimesDir = RUNTIMES_DIR): Harness {
  return {
    name: "claude-code",
    version: CLAUDE_CODE_VERSION,
    record,
    fileTools: FILE_TOOLS,
    runtimes: (): RuntimeMount[] => [{ name: "harness", hostPath: join(runtimesDir, "harness") }],
    program(def: TaskDefinition, session: HarnessSession, limits: HarnessLimits): AgentProgram {
      const file = (path: string, content: string) => ({ path: `${DIR}/${path}`, content: Buffer.from(content), mode: 0o444 });
      const env: Record<string, string> = {
        ANTHROPIC_BASE_URL: session.baseUrl,
        IS_SANDBOX: "1", // lets --dangerously-skip-permissions run: the sandbox is ours
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1", // no telemetry, error reports, auto-update
        DISABLE_AUTOUPDATER: "1",
        ANTHROPIC_MODEL: session.model,
        ANTHROPIC_SMALL_FAST_MODEL: session.model,
      };
      if (session.contextWindow !== null) env.CLAUDE_CODE_AUTO_COMPACT_WINDOW = String(session.contextWindow);
      return {
        script: [
          // The key is read from a root-owned file, not the task's environment.
          `ANTHROPIC_API_KEY="$(cat /${DIR}/secret)" exec ${BIN} -p --bare`,
          "--output-format stream-json --verbose",
          `--tools ${CLAUDE_CODE_TOOLS.join(",")}`,
          `--max-turns ${limits.maxTurns}`,
          `--model '${session.model}'`,
          // The prompt last, after a flag without a value (--tools would take it as a tool name).
          `--dangerously-skip-permissions "$(cat /${DIR}/instruction.md)"`,
          `> ${EVENTS}`,
        ].join(" "),
        env,
        files: [file("secret", session.secret), file("instruction.md", def.instruction)],
      };
    },
  };
}
