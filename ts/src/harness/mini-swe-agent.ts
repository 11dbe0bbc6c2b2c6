/**
 * mini-swe-agent (PyPI mini-swe-agent), unmodified, on the mounted Python
 * runtime: bash only, through its one `bash` tool. mini-swe-agent/driver.py
 * runs its DefaultAgent with its own mini.yaml, the model an OpenAI-compatible
 * litellm `openai/<model>` at the session. Its own record is the trajectory
 * it saves after every step (`mini-swe-agent-1.1`): assistant messages list
 * their `actions`, `tool` messages answer them by id, an `exit` message ends it.
 */
import { readFileSync } from "node:fs";
import type { AgentProgram, TaskDefinition } from "../sandbox/index.ts";
import { RUNTIMES_DIR } from "./claude-code.ts";
import { pythonDriverProgram, pythonRuntimes } from "./python-runtime.ts";
import type { FileTools } from "./file-touches.ts";
import { isObject, list, RECORD_MAX_BYTES, str, type HarnessRecordReader, type HarnessToolCall } from "./report.ts";
import type { Harness, HarnessLimits, HarnessSession } from "./types.ts";

/** Pinned in scripts/sandbox/python-locks/mini-swe-agent.in. */
export const MINI_SWE_AGENT_VERSION = "2.4.6";
const DRIVER = readFileSync(new URL("./mini-swe-agent/driver.py", import.meta.url));
const TRAJECTORY = "/tmp/lego-mini-swe-agent.traj.json";

const extra = (m: Record<string, unknown>): Record<string, unknown> => (isObject(m["extra"]) ? m["extra"] : {});

/**
 * An action ran when a `tool` message answers its id, unless that message
 * says it was not executed (a step cut short); the submitting command has no
 * answer, its `exit` message (`Submitted`) says it ran.
 */
const record: HarnessRecordReader = {
  file: { path: TRAJECTORY, maxBytes: RECORD_MAX_BYTES },
  parse(text) {
    const traj: unknown = JSON.parse(text);
    if (!isObject(traj)) throw new TypeError("the trajectory is not a JSON object");
    const messages = list(traj["messages"]).filter(isObject);
    const answers = new Map<string, Record<string, unknown>>();
    for (const m of messages) if (m["role"] === "tool" && str(m["tool_call_id"])) answers.set(str(m["tool_call_id"])!, extra(m));
    const toolCalls: HarnessToolCall[] = [];
    messages.forEach((m, i) => {
      if (m["role"] !== "assistant") return;
      for (const a of list(extra(m)["actions"]).filter(isObject)) {
        const command = str(a["command"]);
        const answer = answers.get(str(a["tool_call_id"]) ?? "");
        const submitted = !answer && messages[i + 1]?.["role"] === "exit" && extra(messages[i + 1]!)["exit_status"] === "Submitted";
        if (command === null || !(submitted || (answer && answer["exception_info"] !== "action was not executed"))) continue;
        toolCalls.push({ name: "bash", arguments: { command }, ok: submitted || answer!["returncode"] === 0 });
      }
    });
    const exit = messages.findLast((m) => m["role"] === "exit");
    const notes = exit ? [] : ["no `exit` message: the run ended before mini-swe-agent finished"];
    return { toolCalls, finalMessage: exit ? (str(exit["content"]) || str(extra(exit)["exit_status"])) : null, notes };
  },
};

export function miniSweAgentHarness(runtimesDir = RUNTIMES_DIR): Harness {
  return {
    name: "mini-swe-agent",
    version: MINI_SWE_AGENT_VERSION,
    record,
    // Its one tool: every file it reads or writes goes through bash.
    fileTools: { paths: [], shells: [{ name: "bash", command: "command" }] },
    runtimes: () => pythonRuntimes(runtimesDir, "mini-swe-agent"),
    program(def: TaskDefinition, session: HarnessSession, limits: HarnessLimits): AgentProgram {
      return pythonDriverProgram("mini-swe-agent", DRIVER, def, session, limits, {
        args: [`--trajectory ${TRAJECTORY}`],
        env: {
          MSWEA_GLOBAL_CONFIG_DIR: "/tmp/mini-swe-agent", // it creates its config folder at import
          MSWEA_SILENT_STARTUP: "1",
          MSWEA_COST_TRACKING: "ignore_errors",
        },
      });
    },
  };
}
