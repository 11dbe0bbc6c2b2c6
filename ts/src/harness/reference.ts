/**
 * The reference harness: our own small agent (reference/agent.py, stdlib
 * Python, so it runs on what the base image has). The files go in root-owned
 * under /opt/lego-harness; the agent user can read them, not change them.
 * Its own record is the JSON-lines trajectory it appends every turn, tool run
 * and ending to.
 */
import { readFileSync } from "node:fs";
import type { AgentProgram, TaskDefinition } from "../sandbox/index.ts";
import type { FileTools } from "./file-touches.ts";
import { isObject, jsonArguments, jsonLines, list, RECORD_MAX_BYTES, str, type HarnessRecordReader, type HarnessToolCall } from "./report.ts";
import { HARNESS_FILES_DIR, type Harness, type HarnessLimits, type HarnessSession } from "./types.ts";

const AGENT_SOURCE = readFileSync(new URL("./reference/agent.py", import.meta.url));
const DIR = HARNESS_FILES_DIR;
const TRAJECTORY = "/tmp/lego-trajectory.jsonl";

/** Whether agent.py's tool output says the tool did its job: its errors start `error:`, a command's output with its exit code. */
function toolOk(name: string, output: string): boolean {
  if (name === "bash") return output.startsWith("exit code 0\n");
  return !output.startsWith("error:");
}

/** agent.py's trajectory: `tool` events are the calls it ran; `end` says how it ended (a `submit` call ran too). */
const record: HarnessRecordReader = {
  file: { path: TRAJECTORY, maxBytes: RECORD_MAX_BYTES },
  parse(text) {
    const notes: string[] = [];
    const toolCalls: HarnessToolCall[] = [];
    let finalMessage: string | null = null;
    let lastTurnCalls: unknown[] = [];
    for (const e of jsonLines(text, notes)) {
      if (e["event"] === "turn") lastTurnCalls = list(e["tool_calls"]);
      else if (e["event"] === "tool") {
        const name = str(e["name"]);
        if (name) toolCalls.push({ name, arguments: jsonArguments(str(e["arguments"]) ?? ""), ok: toolOk(name, str(e["output"]) ?? "") });
      } else if (e["event"] === "end") {
        finalMessage = str(e["final"]);
        // `submit` ends the run without a `tool` event: it ran with the arguments its turn lists.
        const submit = lastTurnCalls.find((c) => isObject(c) && c["name"] === "submit");
        if (e["reason"] === "submit" && isObject(submit)) toolCalls.push({ name: "submit", arguments: jsonArguments(str(submit["arguments"]) ?? "{}"), ok: true });
      }
    }
    return { toolCalls, finalMessage, notes };
  },
};

/** agent.py's TOOLS: each file tool names its file by `path`. */
const FILE_TOOLS: FileTools = {
  paths: [
    { name: "read_file", path: "path", touch: "read" },
    { name: "write_file", path: "path", touch: "edit" },
    { name: "edit_file", path: "path", touch: "edit" },
  ],
  shells: [{ name: "bash", command: "command" }],
};

export const referenceHarness: Harness = {
  name: "reference",
  version: "1",
  runtimes: () => [],
  record,
  fileTools: FILE_TOOLS,
  program(def: TaskDefinition, session: HarnessSession, limits: HarnessLimits): AgentProgram {
    const file = (path: string, content: string | Buffer, mode = 0o444) => ({ path: `${DIR}/${path}`, content: Buffer.from(content), mode });
    return {
      script: [
        `exec python3 /${DIR}/agent.py`,
        `--base-url '${session.baseUrl}/v1'`,
        `--secret-file /${DIR}/secret`,
        `--model '${session.model}'`,
        `--instruction-file /${DIR}/instruction.md`,
        `--trajectory ${TRAJECTORY}`,
        `--max-turns ${limits.maxTurns}`,
      ].join(" "),
      files: [file("agent.py", AGENT_SOURCE), file("secret", session.secret), file("instruction.md", def.instruction)],
    };
  },
};
