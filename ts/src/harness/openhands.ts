/**
 * OpenHands SDK (PyPI openhands-sdk + openhands-tools), unmodified, on the
 * mounted Python runtime. The SDK has no CLI: openhands/driver.py builds its
 * Agent with the SDK's own terminal and file-editor tools and runs one local
 * Conversation, the LLM an OpenAI-compatible `openai/<model>` at the session.
 * Its own record is the SDK's event log the driver writes (one event's
 * `model_dump_json()` a line, `kind` its class): an ActionEvent per tool call,
 * answered by an ObservationEvent (or an AgentErrorEvent) with its id.
 */
import { readFileSync } from "node:fs";
import type { AgentProgram, TaskDefinition } from "../sandbox/index.ts";
import { RUNTIMES_DIR } from "./claude-code.ts";
import { pythonDriverProgram, pythonRuntimes } from "./python-runtime.ts";
import type { FileTools } from "./file-touches.ts";
import { isObject, jsonArguments, jsonLines, list, RECORD_MAX_BYTES, str, type HarnessRecordReader, type HarnessToolCall } from "./report.ts";
import type { Harness, HarnessLimits, HarnessSession } from "./types.ts";

/** Pinned in scripts/sandbox/python-locks/openhands.in. */
export const OPENHANDS_SDK_VERSION = "1.58.2";
const DRIVER = readFileSync(new URL("./openhands/driver.py", import.meta.url));
const EVENTS = "/tmp/lego-openhands-events.jsonl";

/** The text of an agent MessageEvent's LLM message. */
function messageText(e: Record<string, unknown>): string | null {
  const msg = isObject(e["llm_message"]) ? e["llm_message"] : {};
  const texts = list(msg["content"]).filter(isObject).map((c) => str(c["text"])).filter((t) => t !== null);
  return texts.length ? texts.join("") : null;
}

/** file_editor reads or changes `path` by its `command` (undo_edit changes the file back); terminal runs `command`. */
const FILE_TOOLS: FileTools = {
  paths: [{ name: "file_editor", path: "path", touch: { by: "command", read: ["view"], edit: ["create", "str_replace", "insert", "undo_edit"] } }],
  shells: [{ name: "terminal", command: "command" }],
};

/** A tool call ran when its ActionEvent carries an action and an observation answers its id (ok unless it is an error). */
const record: HarnessRecordReader = {
  file: { path: EVENTS, maxBytes: RECORD_MAX_BYTES },
  parse(text) {
    const notes: string[] = [];
    const events = jsonLines(text, notes);
    const answered = new Map<string, boolean>();
    for (const e of events) {
      const id = str(e["tool_call_id"]);
      if (!id) continue;
      if (e["kind"] === "ObservationEvent") answered.set(id, !(isObject(e["observation"]) && e["observation"]["is_error"] === true));
      else if (e["kind"] === "AgentErrorEvent" || e["kind"] === "UserRejectObservation") answered.set(id, false);
    }
    const toolCalls: HarnessToolCall[] = [];
    let finalMessage: string | null = null;
    for (const e of events) {
      if (e["kind"] === "ActionEvent" && isObject(e["tool_call"]) && isObject(e["action"])) {
        const call = e["tool_call"];
        const id = str(e["tool_call_id"]);
        const name = str(call["name"]);
        if (id && name && answered.has(id)) toolCalls.push({ name, arguments: jsonArguments(str(call["arguments"]) ?? ""), ok: answered.get(id)! });
        if (e["action"]["kind"] === "FinishAction") finalMessage = str(e["action"]["message"]);
      } else if (e["kind"] === "MessageEvent" && e["source"] === "agent") finalMessage = messageText(e) ?? finalMessage;
    }
    return { toolCalls, finalMessage, notes };
  },
};

export function openHandsHarness(runtimesDir = RUNTIMES_DIR): Harness {
  return {
    name: "openhands",
    version: OPENHANDS_SDK_VERSION,
    record,
    fileTools: FILE_TOOLS,
    runtimes: () => pythonRuntimes(runtimesDir, "openhands"),
    program(def: TaskDefinition, session: HarnessSession, limits: HarnessLimits): AgentProgram {
      return pythonDriverProgram("openhands", DRIVER, def, session, limits, {
        args: [`--events ${EVENTS}`],
        env: { OPENHANDS_SUPPRESS_BANNER: "1" },
      });
    },
  };
}
